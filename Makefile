# Makefile: builds fosd, the fos CLI, libfos and the numerics library into build/.
#   make            build everything (the CUDA backend too where nvcc exists; CUDA=0 to skip)
#   make run        install missing dependencies, build, start fosd in the foreground
#   make test       the whole CPU test suite (ends with "N passed, N failed")
#   make test-gpu   GPU tests (skip cleanly without a GPU)
#   make bench      benchmarks; results go to bench/BENCHMARKS.md by hand
#   make install    [PREFIX=/usr/local] [DESTDIR=root]: programs, libfos, headers, fos.pc, unit, Python
# Files are picked up by folder (ARCHITECTURE.md): kernels/*.c (+ *.cu) -> libfosnum.a;
# formats/*.c -> libfosformats.a;
# proto/*.proto (generated) + proto/*.c (framing, nng work-around) -> libfosproto.a; server/*/*.c ->
# libfosd.a + fosd (main in server/core/fosd_main.c); client/libfos/*.c -> libfos; client/cli/*.c ->
# fos (which links only libfos, libfosproto and libfosnum); tests/test_*.c -> one cmocka binary each,
# tests/gpu_*.c -> GPU test binaries, bench/bench_*.c -> benchmark binaries.

BUILD     ?= build
# Parallel by default: a make given no -j (on its command line or in $MAKEFLAGS) runs one job per
# CPU; a -j given wins (make -j1 for one at a time), and sub-makes share their parent's jobs.
ifeq ($(MAKELEVEL)$(filter -j% j% --jobs%,$(MAKEFLAGS) $(shell printenv MAKEFLAGS)),0)
MAKEFLAGS += -j$(shell nproc 2>/dev/null || echo 1)
endif
CUDA_HOME ?= /usr/local/cuda
NVCC      ?= $(firstword $(shell command -v nvcc 2>/dev/null) $(wildcard $(CUDA_HOME)/bin/nvcc))
CUDA      ?= $(if $(and $(NVCC),$(wildcard kernels/*.cu)),1,0)
LIBDIR    ?= /usr/lib/x86_64-linux-gnu
SAN       ?=

CC      ?= cc
CFLAGS  ?= -O2 -g
SERVER_DIRS := $(sort $(dir $(wildcard server/*/*.c server/*/*.h)))
# Each part sees its own folder and the layers below it (ARCHITECTURE.md "The layer order";
# tests/test_layers.py checks these paths): proto <- kernels <- formats <- (server, client/libfos)
# <- client/cli. INCLUDES, every folder, is for tests, benchmarks and the fuzz build only.
INC_PROTO   = -Iproto -I$(BUILD)/gen
INC_KERNELS = -Ikernels -Iproto
INC_FORMATS = -Iformats $(INC_KERNELS)
INC_SERVER  = $(patsubst %/,-I%,$(SERVER_DIRS)) $(INC_FORMATS) -I$(BUILD)/gen
INC_LIBFOS  = -Iclient/libfos $(INC_PROTO)
INC_CLI     = -Iclient/cli -Iclient/libfos $(INC_FORMATS) -I$(BUILD)/gen
INCLUDES = -Ikernels -Iproto -Iformats -Iclient/libfos -Iclient/cli $(patsubst %/,-I%,$(SERVER_DIRS)) -I$(BUILD)/gen
# -fms-extensions: a struct may embed another unnamed (`struct b { struct a; int y; }`), whose
# fields it then has by name: how each stage of fosd's state begins with the part of the stage
# below it (server/core/server.h). GCC and clang both have it.
CFLAGS  += -std=c11 -fms-extensions -Wall -Wextra -Werror -ffp-contract=off -D_GNU_SOURCE -pthread -fPIC \
           $(INCLUDES) $(SAN)
LDFLAGS += -pthread $(SAN)
# nng, protobuf-c, libuv, http-parser and jansson are linked statically so the same binaries run on machines
# that do not have them (the GPU host); cuBLASLt and the CUDA runtime dynamically (fosd, tests and
# benchmarks; fos loads them only with the CUDA backend, from $(BUILD)/libfos-cuda.so: below).
STATIC_LIBS = $(LIBDIR)/libnng.a $(LIBDIR)/libmbedtls.a $(LIBDIR)/libmbedx509.a \
              $(LIBDIR)/libmbedcrypto.a $(LIBDIR)/libprotobuf-c.a $(LIBDIR)/libuv_a.a \
              $(LIBDIR)/libhttp_parser.a $(LIBDIR)/libjansson.a
SYS_LIBS    = -lm -ldl -lrt -latomic

ifeq ($(CUDA),1)
NVCCFLAGS ?= -O3 -gencode=arch=compute_90,code=sm_90 --fmad=false -std=c++17 \
             -Xcompiler -ffp-contract=off,-fPIC,-Wall -Ikernels -Iproto
CFLAGS    += -DFOS_HAVE_CUDA=1
CUDA_LIBS  = -L$(CUDA_HOME)/lib64 -Wl,-rpath,$(CUDA_HOME)/lib64 -lcublasLt -lcudart -lstdc++
else
CUDA_LIBS  =
endif

KERNEL_C   := $(wildcard kernels/*.c)
FORMATS_C  := $(wildcard formats/*.c)
KERNEL_CU  := $(if $(filter 1,$(CUDA)),$(wildcard kernels/*.cu))
FOSD_MAIN  := server/core/fosd_main.c
SERVER_C   := $(filter-out $(FOSD_MAIN),$(wildcard server/*/*.c))
LIBFOS_C   := $(wildcard client/libfos/*.c)
CLI_C      := $(wildcard client/cli/*.c)
WIRE_C     := $(wildcard proto/*.c)
PROTO      := $(wildcard proto/*.proto)
PROTO_C    := $(patsubst proto/%.proto,$(BUILD)/gen/%.pb-c.c,$(PROTO))
TEST_C     := $(wildcard tests/test_*.c)
GPUTEST_C  := $(wildcard tests/gpu_*.c)
BENCH_C    := $(wildcard bench/bench_*.c)
TESTLIB_C  := $(wildcard tests/support_*.c)
TESTLIB_CU := $(if $(filter 1,$(CUDA)),$(wildcard tests/support_*.cu))
BENCHLIB_CU := $(if $(filter 1,$(CUDA)),$(wildcard bench/support_*.cu) tests/support_smallm_variants.cu)

obj = $(patsubst %.c,$(BUILD)/obj/%.o,$(1))
cuobj = $(patsubst %.cu,$(BUILD)/obj/%.cu.o,$(1))

LIBNUM   = $(BUILD)/libfosnum.a
LIBPROTO = $(BUILD)/libfosproto.a
LIBFOSD  = $(BUILD)/libfosd.a
LIBFOS   = $(BUILD)/libfos.a
LIBFOSSO = $(BUILD)/libfos.so
LIBCLI   = $(BUILD)/libfoscli.a
LIBFMT   = $(BUILD)/libfosformats.a
LIBTEST  = $(BUILD)/libfostest.a
# the benchmarks' CUDA support code (bench/support_*.cu: the baseline GEMM; the small-M kernel
# variants of tests/support_smallm_variants.cu, which the GPU tests check), with CUDA=1 only
LIBBENCH = $(if $(BENCHLIB_CU),$(BUILD)/libfosbench.a)

TESTS    = $(patsubst tests/%.c,$(BUILD)/tests/%,$(TEST_C))
GPUTESTS = $(patsubst tests/%.c,$(BUILD)/tests/%,$(GPUTEST_C))
BENCHES  = $(patsubst bench/%.c,$(BUILD)/bench/%,$(BENCH_C))

BINS = $(BUILD)/fos $(if $(wildcard $(FOSD_MAIN)),$(BUILD)/fosd)

.PHONY: all deps run test test-gpu bench tests benches clean install fuzz
all: deps-check $(BINS) $(LIBFOS) $(if $(LIBFOS_C),$(LIBFOSSO))

# ---- dependencies ----------------------------------------------------------------------------
DEPS_OK := $(shell test -f $(LIBDIR)/libnng.a -a -f $(LIBDIR)/libprotobuf-c.a -a -f $(LIBDIR)/libuv_a.a \
             -a -f $(LIBDIR)/libhttp_parser.a -a -f $(LIBDIR)/libjansson.a \
             -a -f /usr/include/cmocka.h -a -f $(LIBDIR)/libmbedtls.a && command -v protoc-c >/dev/null && echo 1)
.PHONY: deps-check
deps-check:
ifneq ($(DEPS_OK),1)
	@sh deploy/install-deps.sh
endif
deps:
	@sh deploy/install-deps.sh

# ---- generated protobuf-c code ---------------------------------------------------------------
$(BUILD)/gen/%.pb-c.c $(BUILD)/gen/%.pb-c.h: proto/%.proto | deps-check
	@mkdir -p $(BUILD)/gen
	protoc-c --proto_path=proto --c_out=$(BUILD)/gen $<

# every C object may include the generated headers
$(call obj,$(SERVER_C) $(LIBFOS_C) $(CLI_C) $(WIRE_C) $(TEST_C) $(TESTLIB_C) $(GPUTEST_C) $(BENCH_C) $(FOSD_MAIN)): $(PROTO_C)

# each part's include paths (above)
$(call obj,$(KERNEL_C)): INCLUDES = $(INC_KERNELS)
$(call obj,$(FORMATS_C)): INCLUDES = $(INC_FORMATS)
$(call obj,$(WIRE_C)): INCLUDES = $(INC_PROTO)
$(call obj,$(SERVER_C) $(FOSD_MAIN)): INCLUDES = $(INC_SERVER)
$(call obj,$(LIBFOS_C) $(wildcard client/libfos/so/*.c)): INCLUDES = $(INC_LIBFOS)
$(call obj,$(CLI_C) $(wildcard client/cli/cuda/*.c)): INCLUDES = $(INC_CLI)

# ---- objects ---------------------------------------------------------------------------------
# (after deps-check: with parallel jobs nothing compiles while missing packages are installed)
$(BUILD)/obj/%.o: %.c | deps-check
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -MMD -MP -c $< -o $@

$(BUILD)/obj/%.pb-c.o: $(BUILD)/gen/%.pb-c.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -Wno-unused-parameter -c $< -o $@

$(BUILD)/obj/%.cu.o: %.cu
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCCFLAGS) -MMD -MP -c $< -o $@

-include $(shell find $(BUILD)/obj -name '*.d' 2>/dev/null)

# ---- libraries -------------------------------------------------------------------------------
$(LIBNUM): $(call obj,$(KERNEL_C)) $(call cuobj,$(KERNEL_CU))
	@rm -f $@; ar rcs $@ $^
$(LIBPROTO): $(patsubst $(BUILD)/gen/%.pb-c.c,$(BUILD)/obj/%.pb-c.o,$(PROTO_C)) $(call obj,$(WIRE_C))
	@rm -f $@; ar rcs $@ $^
$(LIBFOSD): $(call obj,$(SERVER_C))
	@rm -f $@; ar rcs $@ $^
# libfos.a carries the generated protobuf-c code too, so a client links -lfos -lnng -lprotobuf-c.
PROTO_OBJ = $(patsubst $(BUILD)/gen/%.pb-c.c,$(BUILD)/obj/%.pb-c.o,$(PROTO_C))
$(LIBFOS): $(call obj,$(LIBFOS_C)) $(PROTO_OBJ) $(call obj,$(filter-out proto/nng_fix.c,$(WIRE_C)))
	@rm -f $@; ar rcs $@ $^
# libfos.so.N (N = FOS_SOVERSION of proto/fos_version.h; libfos.so links to it): only fos.h's
# functions exported (client/libfos/libfos.map), with nng, mbedTLS, protobuf-c and the nng
# work-around linked in privately from the static archives, so a program or FFI user needs no other
# library (-z defs: nothing left undefined but the C library's). Debian's libnng.a is
# position-independent but for posix_debug.c's direct references to stdout and stderr, which a
# shared object cannot make: $(LIBNNG_SO) is a copy naming fos_nng_stdout/_stderr there instead,
# defined by client/libfos/so/nng_stdio.c.
LIBFOS_SOVERSION := $(shell sed -n 's/^.define FOS_SOVERSION  *\([0-9][0-9]*\).*/\1/p' proto/fos_version.h)
LIBFOS_SONAME = libfos.so.$(LIBFOS_SOVERSION)
LIBFOSSO1     = $(BUILD)/$(LIBFOS_SONAME)
LIBFOS_MAP    = client/libfos/libfos.map
LIBFOS_SO_C  := $(wildcard client/libfos/so/*.c)
LIBNNG_SO     = $(BUILD)/libnng-so.a
LIBFOS_SO_OBJ = $(call obj,$(LIBFOS_C) $(LIBFOS_SO_C))
$(LIBNNG_SO): $(LIBDIR)/libnng.a
	objcopy --redefine-sym stdout=fos_nng_stdout --redefine-sym stderr=fos_nng_stderr $< $@
$(LIBFOSSO1): $(LIBFOS_SO_OBJ) $(LIBPROTO) $(LIBNNG_SO) $(LIBFOS_MAP)
	$(CC) -shared -o $@ -Wl,-soname,$(LIBFOS_SONAME) -Wl,--version-script=$(LIBFOS_MAP) $(if $(SAN),,-Wl,-z,defs) \
		$(LIBFOS_SO_OBJ) $(LIBPROTO) $(LIBNNG_SO) $(LIBDIR)/libmbedtls.a $(LIBDIR)/libmbedx509.a \
		$(LIBDIR)/libmbedcrypto.a $(LIBDIR)/libprotobuf-c.a \
		$(LDFLAGS) $(SYS_LIBS) $(NNG_FIX)
$(LIBFOSSO): $(LIBFOSSO1)
	ln -sf $(LIBFOS_SONAME) $@
# libfosnum-cpu.a: the numerics without the CUDA objects, for fos (whose CUDA backend is a plugin)
LIBNUM_CPU = $(BUILD)/libfosnum-cpu.a
$(LIBNUM_CPU): $(call obj,$(KERNEL_C))
	@rm -f $@; ar rcs $@ $^
# the formats every program shares (npy, safetensors, the regular-file reader, the latency
# histogram): fosd, fos and the tests link it
$(LIBFMT): $(call obj,$(FORMATS_C))
	@rm -f $@; ar rcs $@ $^
$(LIBCLI): $(call obj,$(CLI_C))
	@rm -f $@; ar rcs $@ $^
# the tests' support code (and with CUDA=1 the GPU proofs of tests/support_*.cu, test code that no
# program carries)
$(LIBTEST): $(call obj,$(TESTLIB_C)) $(call cuobj,$(TESTLIB_CU))
	@rm -f $@; ar rcs $@ $^

$(BUILD)/libfosbench.a: $(call cuobj,$(BENCHLIB_CU))
	@rm -f $@; ar rcs $@ $^

# fosd links no client code; the tests and benchmarks link everything
FOSD_LIBS = $(LIBFOSD) $(LIBFMT) $(LIBPROTO) $(LIBNUM)
ALL_LIBS = $(LIBFOSD) $(LIBCLI) $(LIBFOS) $(LIBFMT) $(LIBPROTO) $(LIBNUM)
# nng 1.5.2 work-arounds (proto/nng_fix.c): inside the statically linked nng, EPIPE maps to
# NNG_ECONNRESET (a peer vanishing during the SP handshake no longer stops a listener for good;
# fixed upstream in 1.6.0), and a stream aio left unstarted by a pipe closed mid partial write is
# completed. -u pulls proto/nng_fix.o out of libfosproto.a.
NNG_FIX = -Wl,--wrap=nni_plat_errno -Wl,-u,__wrap_nni_plat_errno -Wl,--wrap=nng_stream_send \
	-Wl,--wrap=nng_stream_recv -Wl,--wrap=nni_pipe_send
# Large message bodies of the static nng come from server/transport/msg_pool.c: reused, not cleared, and
# pinned for DMA in a cuda fosd. -u pulls server/transport/msg_pool.o out of libfosd.a.
MSGPOOL_WRAP = -Wl,--wrap=nni_msg_alloc -Wl,--wrap=nni_zalloc -Wl,--wrap=nni_alloc -Wl,--wrap=nni_free \
	-Wl,-u,__wrap_nni_zalloc
LINK = $(STATIC_LIBS) $(CUDA_LIBS) $(LDFLAGS) $(SYS_LIBS) $(NNG_FIX) $(MSGPOOL_WRAP)
# the CLI: libfos and the CPU numerics only (no server code, so no message pool). Every fos run
# (fos --version, a container's HEALTHCHECK) would pay for loading cuBLASLt and the CUDA runtime
# (~1 s, ~200 MB) if fos linked them: in a CUDA build the CUDA backend is instead the plugin
# $(BUILD)/libfos-cuda.so (the .cu objects and the numerics they call, exporting fos_backend_cuda
# alone), which fos opens with dlopen the first time --local needs the cuda backend
# (client/cli/cuda/cli_cuda_plugin.c; installed as BINDIR/../lib/fos/libfos-cuda.so).
CLI_LIBS = $(LIBCLI) $(LIBFOS) $(LIBFMT) $(LIBPROTO) $(LIBNUM_CPU)
ifeq ($(CUDA),1)
CLI_PLUGIN_C  := $(wildcard client/cli/cuda/*.c)
CLI_CUDA_OBJ   = $(call obj,$(CLI_PLUGIN_C))
LIBFOSCUDA     = $(BUILD)/libfos-cuda.so
$(LIBFOSCUDA): $(call cuobj,$(KERNEL_CU)) $(LIBNUM_CPU) client/cli/cuda/libfos-cuda.map
	$(CC) -shared -o $@ -Wl,--version-script=client/cli/cuda/libfos-cuda.map $(if $(SAN),,-Wl,-z,defs) \
		$(call cuobj,$(KERNEL_CU)) $(LIBNUM_CPU) $(CUDA_LIBS) $(LDFLAGS) $(SYS_LIBS)
endif

# ---- programs --------------------------------------------------------------------------------
$(BUILD)/fos: $(CLI_LIBS) $(CLI_CUDA_OBJ) $(LIBFOSCUDA)
	$(CC) -o $@ -Wl,--whole-archive $(LIBCLI) -Wl,--no-whole-archive $(CLI_CUDA_OBJ) $(CLI_LIBS) $(STATIC_LIBS) \
		$(LDFLAGS) $(SYS_LIBS) $(NNG_FIX)
$(BUILD)/fosd: $(call obj,$(FOSD_MAIN)) $(FOSD_LIBS)
	$(CC) -o $@ $< $(FOSD_LIBS) $(LINK)

$(BUILD)/tests/%: $(BUILD)/obj/tests/%.o $(LIBTEST) $(ALL_LIBS)
	@mkdir -p $(dir $@)
	$(CC) -o $@ $< $(LIBTEST) $(ALL_LIBS) -lcmocka $(LINK)
# GPU tests run on the GPU host, which has no cmocka: they find a copy in $(BUILD)/lib.
$(BUILD)/lib/libcmocka.so.0:
	@mkdir -p $(dir $@)
	cp -L $(LIBDIR)/libcmocka.so.0 $@
$(GPUTESTS): $(BUILD)/tests/gpu_%: $(BUILD)/obj/tests/gpu_%.o $(LIBTEST) $(ALL_LIBS) $(BUILD)/lib/libcmocka.so.0
	@mkdir -p $(dir $@)
	$(CC) -o $@ $< $(LIBTEST) $(ALL_LIBS) -L$(BUILD)/lib -l:libcmocka.so.0 -Wl,-rpath,'$$ORIGIN/../lib' $(LINK)
$(BUILD)/bench/%: $(BUILD)/obj/bench/%.o $(LIBBENCH) $(ALL_LIBS)
	@mkdir -p $(dir $@)
	$(CC) -o $@ $< $(LIBBENCH) $(ALL_LIBS) $(LINK)
# bench/bench_nvfp4_gemm.cu: a CUDA program of its own (an experiment of issue 19), built on request
# and only with CUDA=1: make BUILD=build-x build-x/bench/bench_nvfp4_gemm
ifeq ($(CUDA),1)
$(BUILD)/bench/bench_nvfp4_gemm: $(BUILD)/obj/bench/bench_nvfp4_gemm.cu.o $(LIBBENCH) $(LIBNUM)
	@mkdir -p $(dir $@)
	$(CC) -o $@ $< $(LIBBENCH) $(LIBNUM) $(CUDA_LIBS) $(LDFLAGS) $(SYS_LIBS)
# bench/bench_ctx_switch.cu (issue 16): two processes taking turns on the GPU against two threads
$(BUILD)/bench/bench_ctx_switch: bench/bench_ctx_switch.cu
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCCFLAGS) $< -o $@ -lcudart
# bench/bench_mma_chain.cu (issue 28): the dependent mma.sync / wgmma chain's step time (sm_90a)
$(BUILD)/bench/bench_mma_chain: bench/bench_mma_chain.cu
	@mkdir -p $(dir $@)
	$(NVCC) $(filter-out -gencode=%,$(NVCCFLAGS)) -gencode=arch=compute_90a,code=sm_90a $< -o $@ -lcudart
# bench/bench_host_cost.cu (issue 27): the host's time per CUDA call of a layer's ops, 1 and 4 threads
$(BUILD)/bench/bench_host_cost: bench/bench_host_cost.cu
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCCFLAGS) $< -o $@ -lcudart
# bench/probe_wait_value.cu (issue 27): a client stream's wait on a word another process writes
$(BUILD)/bench/probe_wait_value: bench/probe_wait_value.cu
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCCFLAGS) $< -o $@ -lcuda
# bench/bench_nvfp4_wgmma.cu (issue 19, step 2): likewise, for sm_90a (wgmma): make BUILD=build-x build-x/bench/bench_nvfp4_wgmma
$(BUILD)/obj/bench/bench_nvfp4_wgmma.cu.o: bench/bench_nvfp4_wgmma.cu
	@mkdir -p $(dir $@)
	$(NVCC) $(filter-out -gencode=%,$(NVCCFLAGS)) -gencode=arch=compute_90a,code=sm_90a -MMD -MP -c $< -o $@
$(BUILD)/bench/bench_nvfp4_wgmma: $(BUILD)/obj/bench/bench_nvfp4_wgmma.cu.o $(LIBBENCH) $(LIBNUM)
	@mkdir -p $(dir $@)
	$(CC) -o $@ $< $(LIBBENCH) $(LIBNUM) $(CUDA_LIBS) $(LDFLAGS) $(SYS_LIBS)
endif

tests: all $(TESTS)
benches: all $(BENCHES)

# ---- the commands ----------------------------------------------------------------------------
# fosd in the foreground; on a GPU host under NVIDIA MPS, with a private control daemon for the run
# when none runs (deploy/run-fosd.sh says what it does)
run: all
	@sh deploy/run-fosd.sh $(BUILD)

# The unit suites, then each target of TEST_EXTRA (e.g. test-san: the suites again under ASan +
# UBSan, tests/sanitize.mk); every group adds its sums to one tally, closed by ONE line
# "N passed, N failed, N skipped" (tests/run-tests.sh). A TEST_EXTRA target that fails to build
# counts as a failure.
TEST_TALLY = $(BUILD)/.test-tally
test: tests
	@rm -f $(TEST_TALLY)
	@FOS_TALLY=$(TEST_TALLY) sh tests/run-tests.sh $(BUILD) $(TESTS)
	@for t in $(TEST_EXTRA); do \
		FOS_TALLY=$(abspath $(TEST_TALLY)) $(MAKE) --no-print-directory $$t || echo "0 1 0 $$t(build)" >>$(TEST_TALLY); \
	done
	@sh tests/run-tests.sh --total $(TEST_TALLY)

test-gpu: all $(GPUTESTS)
	@sh tests/run-tests.sh $(BUILD) $(GPUTESTS)

bench: benches
	@sh bench/run-bench.sh $(BUILD)

# make install [PREFIX=/usr/local] [DESTDIR=staging root]: fosd and fos (and fos's CUDA plugin), libfos
# (libfos.so.N, the libfos.so link, libfos.a), the headers of the C API, fos.pc, the systemd units (fosd's,
# its paths set to BINDIR and SYSCONFDIR, and the MPS daemon's it wants) and sysusers file, the example config (never a fosd.conf
# itself), and the Python package (tests/python.mk: install-python, whose libfos.so links to
# INSTALL_LIBDIR's). Everything goes under PREFIX: SYSCONFDIR is /etc only for the system prefixes
# /usr and /usr/local, else PREFIX/etc (SYSCONFDIR=/etc puts it there on purpose). A private
# prefix is not on the loader's path: there fos.pc's Libs carry -Wl,-rpath,LIBDIR, and install
# prints how a program finds libfos.so.N; ldconfig runs only for a system prefix (as root, no
# DESTDIR).
PREFIX         ?= /usr/local
SYSTEM_PREFIX   = $(filter /usr /usr/local,$(patsubst %/,%,$(PREFIX)))
BINDIR         ?= $(PREFIX)/bin
INCLUDEDIR     ?= $(PREFIX)/include
INSTALL_LIBDIR ?= $(PREFIX)/lib
PKGCONFIGDIR   ?= $(INSTALL_LIBDIR)/pkgconfig
SYSCONFDIR     ?= $(if $(SYSTEM_PREFIX),/etc,$(PREFIX)/etc)
# fos opens its CUDA plugin from BINDIR/../lib/fos (client/cli/cuda/cli_cuda_plugin.c)
CLI_PLUGINDIR   = $(abspath $(BINDIR)/..)/lib/fos
UNITDIR        ?= $(PREFIX)/lib/systemd/system
SYSUSERSDIR    ?= $(PREFIX)/lib/sysusers.d
FOS_HEADERS     = client/libfos/fos.h proto/fos_version.h proto/fos_wire_enums.h proto/fos_chan.h
FOS_PC_VERSION := $(shell sed -n 's/^.define FOS_VERSION_\(MAJOR\|MINOR\|PATCH\)  *\([0-9][0-9]*\).*/\2/p' proto/fos_version.h | paste -sd.)
# install-libfos: the library alone; a real install of a system prefix as root (no DESTDIR) runs
# ldconfig, so the loader finds the new libfos.so.N in /usr/local/lib at once
.PHONY: install-libfos
install-libfos: all
	install -d $(DESTDIR)$(INSTALL_LIBDIR)
	install -m 644 $(LIBFOSSO1) $(LIBFOS) $(DESTDIR)$(INSTALL_LIBDIR)/
	ln -sf $(LIBFOS_SONAME) $(DESTDIR)$(INSTALL_LIBDIR)/libfos.so
ifneq ($(SYSTEM_PREFIX),)
	-@[ -n "$(DESTDIR)" ] || [ "$$(id -u)" != 0 ] || PATH="$$PATH:/sbin:/usr/sbin" ldconfig
else
	@echo "install: $(LIBFOS_SONAME) is in $(INSTALL_LIBDIR), which the loader does not search: link programs" \
		"with -Wl,-rpath,$(INSTALL_LIBDIR) (pkg-config fos adds it) or run them with" \
		"LD_LIBRARY_PATH=$(INSTALL_LIBDIR)"
endif
install: all install-libfos
	install -d $(DESTDIR)$(BINDIR) $(DESTDIR)$(INCLUDEDIR) $(DESTDIR)$(PKGCONFIGDIR) \
		$(DESTDIR)$(UNITDIR) $(DESTDIR)$(SYSCONFDIR)/fosd
	install -m 755 $(BINS) $(DESTDIR)$(BINDIR)/
	$(if $(LIBFOSCUDA),install -D -m 644 $(LIBFOSCUDA) $(DESTDIR)$(CLI_PLUGINDIR)/libfos-cuda.so)
	install -m 644 $(FOS_HEADERS) $(DESTDIR)$(INCLUDEDIR)/
	sed -e 's|@PREFIX@|$(PREFIX)|g' -e 's|@LIBDIR@|$(INSTALL_LIBDIR)|g' -e 's|@INCLUDEDIR@|$(INCLUDEDIR)|g' \
		-e 's|@VERSION@|$(FOS_PC_VERSION)|g' $(if $(SYSTEM_PREFIX),,-e 's|^Libs: .*|& -Wl,-rpath,$${libdir}|') \
		client/libfos/fos.pc.in >$(DESTDIR)$(PKGCONFIGDIR)/fos.pc
	sed -e 's|/usr/local/bin/|$(BINDIR)/|g' -e 's|/etc/fosd/|$(SYSCONFDIR)/fosd/|g' deploy/fosd.service \
		>$(DESTDIR)$(UNITDIR)/fosd.service
	chmod 644 $(DESTDIR)$(PKGCONFIGDIR)/fos.pc $(DESTDIR)$(UNITDIR)/fosd.service
	install -m 644 deploy/nvidia-mps.service $(DESTDIR)$(UNITDIR)/
	$(if $(wildcard deploy/fosd.sysusers),install -D -m 644 deploy/fosd.sysusers $(DESTDIR)$(SYSUSERSDIR)/fosd.conf)
	install -m 644 deploy/fosd.conf.example $(DESTDIR)$(SYSCONFDIR)/fosd/

clean:
	rm -rf $(BUILD)

# Extra targets owned by their own fragments (e.g. tests/sanitize.mk, tests/fuzz.mk,
# bench/service.mk); each may add to TEST_EXTRA, a list of make targets run by `make test` after
# the unit suites, with FOS_TALLY set (their run-tests.sh groups add to the one closing line).
-include $(sort $(wildcard tests/*.mk bench/*.mk))
