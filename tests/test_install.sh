#!/bin/sh
# test_install.sh: the packaging of fosd (the Makefile's libfos.so and install rules), checked on
# BUILD's files and on `make install` into two DESTDIRs:
#   sh tests/test_install.sh BUILD          (make test-install; part of `make test`)
# Checks, each one test: libfos.so's SONAME and link; its NEEDED entries (no nng, protobuf-c,
# mbedTLS: they are inside it); its exported symbols (exactly the functions fos.h declares, all of
# version LIBFOS_<SOVERSION> or of a node added after it, LIBFOS_<SOVERSION>.N) and that nothing
# it leaves undefined is theirs; the nng work-around inside it; the files `make install DESTDIR=D` puts, and their links; PREFIX reaching fos.pc, the
# unit and the Python package; each installed header compiling on its own (C and C++); a client
# built with `pkg-config --cflags --libs fos` against the DESTDIR install, linked to libfos.so.N
# alone, run against that install's fosd (cpu backend) and fos; the Python package imported from
# the DESTDIR install, loading that install's libfos.so.N, talking to the same fosd; that fosd
# exiting 0 on SIGTERM. Run it through make (make test-install), so that the build's variables
# (BUILD, CUDA, SAN) reach the `make install` it runs.
# Counts: with FOS_TALLY=FILE one line "PASSED FAILED SKIPPED [names]" is appended to FILE (exit 0),
# else the closing line "N passed, N failed, N skipped" (exit 1 on a failure). FOS_TEST_KEEP=1 keeps
# the temporary directory (installs, client, fosd's log).
BUILD="${1:-build}"
PY="${PYTHON:-}"
if [ -z "$PY" ]; then
	if [ -x /usr/bin/python3 ]; then PY=/usr/bin/python3; else PY=python3; fi
fi
passed=0; failed=0; skipped=0; broken=""
ok() { passed=$((passed + 1)); echo "[       OK ] $1"; }
bad() { failed=$((failed + 1)); broken="$broken install:$1"; echo "[  FAILED  ] $1: $2"; }
skip() { skipped=$((skipped + 1)); echo "[  SKIPPED ] $1: $2"; }

T=$(mktemp -d "${TMPDIR:-/tmp}/fos-install.XXXXXX") || exit 1
T=$(cd "$T" && pwd -P)
FOSD_PID=""
cleanup() {
	if [ -n "$FOSD_PID" ]; then
		kill "$FOSD_PID" 2>/dev/null
		wait "$FOSD_PID" 2>/dev/null
	fi
	if [ -n "$FOS_TEST_KEEP" ]; then echo "kept $T"; else rm -rf "$T"; fi
}
trap cleanup EXIT
trap 'exit 1' INT TERM

echo "== test_install ($BUILD, in $T)"
SOVER=$(sed -n 's/^.define FOS_SOVERSION  *\([0-9][0-9]*\).*/\1/p' proto/fos_version.h)
VERSION=$(sed -n 's/^.define FOS_VERSION_\(MAJOR\|MINOR\|PATCH\)  *\([0-9][0-9]*\).*/\2/p' proto/fos_version.h | paste -sd.)
SONAME="libfos.so.$SOVER"
SO="$BUILD/$SONAME"

# ---- the library in BUILD -------------------------------------------------------------------
if [ -f "$SO" ] && [ "$(readelf -d "$SO" | sed -n 's/.*Library soname: \[\(.*\)\].*/\1/p')" = "$SONAME" ] &&
	[ -L "$BUILD/libfos.so" ] && [ "$(readlink "$BUILD/libfos.so")" = "$SONAME" ]; then
	ok "soname"
else
	bad "soname" "want $SO with SONAME $SONAME and $BUILD/libfos.so -> $SONAME; have: $(readelf -d "$SO" 2>&1 | grep -i soname) $(ls -l "$BUILD"/libfos.so* 2>&1 | tr '\n' ' ')"
fi

needed=$(readelf -d "$SO" 2>/dev/null | sed -n 's/.*(NEEDED).*\[\(.*\)\].*/\1/p' | tr '\n' ' ')
SANITIZED=""
case " $needed" in *" libasan"* | *" libubsan"*) SANITIZED=1 ;; esac
extra=""
for n in $needed; do
	case $n in
	libc.so.* | libm.so.* | libpthread.so.* | libdl.so.* | librt.so.* | libatomic.so.* | ld-linux*) ;;
	libasan.so.* | libubsan.so.* | libstdc++.so.* | libgcc_s.so.*) [ -n "$SANITIZED" ] || extra="$extra $n" ;;
	*) extra="$extra $n" ;;
	esac
done
if [ -n "$needed" ] && [ -z "$extra" ]; then
	ok "needed"
else
	bad "needed" "libfos.so must need only the C library's parts; NEEDED: $needed(not allowed:$extra)"
fi

# The functions fos.h declares (preprocessed, so comments do not count; static inline functions
# would not be exported, and fos.h has none).
hdr_funcs=$(printf '#include "fos.h"\n' | cc -E -P -Iclient/libfos -Ikernels -Iproto -x c - 2>/dev/null |
	tr '\n' ' ' | grep -oE '\bfos_[A-Za-z0-9_]+ *\(' | sed 's/ *($//' | sort -u)
if grep -q 'static inline' client/libfos/fos.h; then
	bad "exports" "fos.h has static inline functions: teach this test to leave them out"
elif [ -z "$hdr_funcs" ]; then
	bad "exports" "found no function in fos.h (cc -E failed?)"
else
	# nm -D lists the version node itself (LIBFOS_1, absolute) besides the functions
	dyn=$(nm -D --defined-only "$SO" 2>/dev/null | awk '$2 != "A" {print $3}')
	names=$(echo "$dyn" | sed 's/@.*//' | sort -u)
	unversioned=$(echo "$dyn" | grep -vE "@@LIBFOS_$SOVER(\.[0-9]+)?\$") # LIBFOS_1, or a later LIBFOS_1.N node
	leaked=$(printf '%s\n' "$names" | grep -vxF "$hdr_funcs")
	missing=$(printf '%s\n' "$hdr_funcs" | grep -vxF "$names")
	undef=$(nm -D --undefined-only "$SO" 2>/dev/null | awk '{print $2}' |
		grep -E '^(nng_|nni_|nuts_|protobuf_c_|mbedtls_|fos)' | tr '\n' ' ')
	if [ -z "$dyn" ]; then
		bad "exports" "nm -D found no symbol in $SO"
	elif [ -n "$leaked$missing$unversioned$undef" ]; then
		bad "exports" "libfos.so must export exactly fos.h's functions, version LIBFOS_$SOVER;$(
			[ -n "$leaked" ] && echo " exported but not in fos.h: $(echo $leaked)";
			[ -n "$missing" ] && echo " in fos.h but not exported: $(echo $missing) (defined? libfos.map?)";
			[ -n "$unversioned" ] && echo " without version LIBFOS_$SOVER(.N): $(echo $unversioned)";
			[ -n "$undef" ] && echo " left undefined: $undef")"
	else
		ok "exports ($(echo "$names" | wc -l) functions)"
	fi
fi

# the nng work-around (proto/nng_fix.c, --wrap) is inside, and nng's stdio references resolved
# inside (client/libfos/so/nng_stdio.c)
syms=$(nm "$SO" 2>/dev/null)
lack=""
for s in __wrap_nni_plat_errno __wrap_nng_stream_send __wrap_nng_stream_recv __wrap_nni_pipe_send fos_nng_stderr; do
	echo "$syms" | grep -qE "^[0-9a-f]+ [tTbBdD] $s\$" || lack="$lack $s"
done
if [ -z "$lack" ]; then ok "nng_fix"; else bad "nng_fix" "not defined locally in $SO:$lack"; fi

# ---- make install into DESTDIRs ---------------------------------------------------------------
ROOT="$T/root"
PYVER=$("$PY" -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null)
inst() { # DESTDIR PREFIX [more make arguments]: make install; its output in DESTDIR.log
	d=$1; p=$2; shift 2
	make --no-print-directory BUILD="$BUILD" PYTHON="$PY" DESTDIR="$d" PREFIX="$p" "$@" install >"$d.log" 2>&1
}
if inst "$ROOT" /usr/local; then
	PYSITE=""
	[ -n "$PYVER" ] && PYSITE="usr/local/lib/python$PYVER/dist-packages"
	{
		for f in usr/local/bin/fos usr/local/bin/fosd usr/local/include/fos.h usr/local/include/fos_chan.h \
			usr/local/include/fos_version.h usr/local/include/fos_wire_enums.h usr/local/lib/libfos.a \
			"usr/local/lib/$SONAME" usr/local/lib/pkgconfig/fos.pc usr/local/lib/systemd/system/fosd.service \
			usr/local/lib/systemd/system/nvidia-mps.service etc/fosd/fosd.conf.example; do
			echo "f $f"
		done
		echo "l usr/local/lib/libfos.so"
		[ -f "$BUILD/libfos-cuda.so" ] && echo "f usr/local/lib/fos/libfos-cuda.so" # a CUDA build: fos's plugin
		[ -f deploy/fosd.sysusers ] && echo "f usr/local/lib/sysusers.d/fosd.conf"
		if [ -n "$PYSITE" ]; then
			for f in client/python/fosd/*.py client/python/fosd/py.typed; do echo "f $PYSITE/fosd/$(basename "$f")"; done
			echo "l $PYSITE/fosd/libfos.so"
		fi
	} | sort >"$T/want.txt"
	(cd "$ROOT" && find . ! -type d -printf '%y %P\n') | sort >"$T/have.txt"
	if ! cmp -s "$T/want.txt" "$T/have.txt"; then
		bad "install_files" "DESTDIR install differs (- expected, + installed): $(diff "$T/want.txt" "$T/have.txt" | grep '^[<>]' | sed 's/^</-/; s/^>/+/' | tr '\n' ' ')"
	elif [ "$(readlink -f "$ROOT/usr/local/lib/libfos.so")" != "$ROOT/usr/local/lib/$SONAME" ] ||
		{ [ -n "$PYSITE" ] && [ "$(readlink -f "$ROOT/$PYSITE/fosd/libfos.so")" != "$ROOT/usr/local/lib/$SONAME" ]; }; then
		bad "install_files" "links: lib/libfos.so -> $(readlink "$ROOT/usr/local/lib/libfos.so"), python's libfos.so -> $(readlink "$ROOT/$PYSITE/fosd/libfos.so" 2>&1) (both must reach lib/$SONAME)"
	elif ! cmp -s "$SO" "$ROOT/usr/local/lib/$SONAME" || ! cmp -s "$BUILD/fosd" "$ROOT/usr/local/bin/fosd" ||
		! cmp -s deploy/fosd.conf.example "$ROOT/etc/fosd/fosd.conf.example" ||
		! cmp -s deploy/nvidia-mps.service "$ROOT/usr/local/lib/systemd/system/nvidia-mps.service"; then
		bad "install_files" "installed files differ from $BUILD's and deploy/'s"
	elif [ ! -x "$ROOT/usr/local/bin/fos" ] || [ ! -x "$ROOT/usr/local/bin/fosd" ]; then
		bad "install_files" "fos and fosd must be executable"
	else
		ok "install_files ($(wc -l <"$T/have.txt") files)"
	fi
else
	bad "install_files" "make install DESTDIR=$ROOT failed: $(tail -5 "$ROOT.log")"
	ROOT=""
fi

OPT="$T/opt"
if inst "$OPT" /opt/fos SYSCONFDIR=/opt/fos/etc; then
	pc="$OPT/opt/fos/lib/pkgconfig/fos.pc"
	unit="$OPT/opt/fos/lib/systemd/system/fosd.service"
	why=""
	grep -qx 'prefix=/opt/fos' "$pc" && grep -qx 'libdir=/opt/fos/lib' "$pc" &&
		grep -qx 'includedir=/opt/fos/include' "$pc" && grep -qx "Version: $VERSION" "$pc" ||
		why="$why fos.pc: $(grep -E '^(prefix|libdir|includedir|Version)' "$pc" 2>&1 | tr '\n' ' ')"
	grep -q '^ExecStart=/opt/fos/bin/fosd' "$unit" && ! grep -q '/usr/local/bin' "$unit" &&
		! grep -qE '(^|[ =])/etc/fosd/' "$unit" || why="$why unit: $(grep -E '/bin/|etc/fosd' "$unit" 2>&1 | tr '\n' ' ')"
	[ -f "$OPT/opt/fos/etc/fosd/fosd.conf.example" ] || why="$why no /opt/fos/etc/fosd/fosd.conf.example"
	if [ -n "$PYVER" ] && [ "$(readlink -f "$OPT/opt/fos/lib/python3/dist-packages/fosd/libfos.so")" != "$OPT/opt/fos/lib/$SONAME" ]; then
		why="$why python package: $(ls -l "$OPT/opt/fos/lib/python3/dist-packages/fosd/libfos.so" 2>&1)"
	fi
	if [ -z "$why" ]; then ok "install_prefix"; else bad "install_prefix" "PREFIX=/opt/fos:$why"; fi
else
	bad "install_prefix" "make install PREFIX=/opt/fos failed: $(tail -5 "$OPT.log")"
fi

# ---- the installed headers and a client built through pkg-config ------------------------------
if [ -z "$ROOT" ]; then
	for t in headers pkgconfig_link pkgconfig_run python_import fosd_stop; do skip "$t" "no DESTDIR install"; done
else
	INC="$ROOT/usr/local/include"
	why=""
	for h in "$INC"/*.h; do
		printf '#include <%s>\nint main(void) { return 0; }\n' "$(basename "$h")" >"$T/h.c"
		cc -std=c11 -Wall -Wextra -Werror -pedantic -fsyntax-only -I"$INC" "$T/h.c" >"$T/h.log" 2>&1 ||
			why="$why $(basename "$h") (C: $(head -3 "$T/h.log" | tr '\n' ' '))"
		# C++ programs include fos.h (extern "C"); fos_chan.h is C11 (_Static_assert)
		if [ "$(basename "$h")" != fos_chan.h ] && command -v c++ >/dev/null 2>&1; then
			c++ -std=c++17 -Wall -Wextra -Werror -fsyntax-only -I"$INC" -x c++ "$T/h.c" >"$T/h.log" 2>&1 ||
				why="$why $(basename "$h") (C++: $(head -3 "$T/h.log" | tr '\n' ' '))"
		fi
	done
	if [ -z "$why" ]; then ok "headers"; else bad "headers" "installed headers must compile alone:$why"; fi

	# The client: versions agree (macros, FOS_VERSION, fos_version(), fosd's Health); one forward
	# of ones: W (16, 16) and X (4, 16) all 1.0, every block all equal to its maximum, so 4/6
	# quantizes them exactly and each Y element is the sum of 16 products 1 * 1 = 16.0 (0x4180).
	cat >"$T/client.c" <<'EOF'
#include <fos.h>
#include <fos_chan.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv)
{
	char v[32];
	snprintf(v, sizeof v, "%d.%d.%d", FOS_VERSION_MAJOR, FOS_VERSION_MINOR, FOS_VERSION_PATCH);
	if (argc != 2 || strcmp(v, FOS_VERSION) || strcmp(fos_version(), FOS_VERSION)) {
		fprintf(stderr, "versions: macros %s, FOS_VERSION %s, fos_version() %s\n", v, FOS_VERSION, fos_version());
		return 2;
	}
	fos_client *c;
	fos_status st;
	fos_health_info h;
	if (fos_connect(argv[1], NULL, 10000, &c, &st) || fos_health(c, &h, &st)) {
		fprintf(stderr, "%s: %s\n", fos_code_name(st.code), st.message);
		return 3;
	}
	if (strcmp(h.version, fos_version())) {
		fprintf(stderr, "fosd %s, libfos %s\n", h.version, fos_version());
		return 4;
	}
	uint16_t w[16 * 16], x[4 * 16];
	for (int i = 0; i < 16 * 16; i++)
		w[i] = 0x3f80;
	for (int i = 0; i < 4 * 16; i++)
		x[i] = 0x3f80;
	fos_tensor wt = fos_tensor_2d(FOS_DTYPE_BF16, 16, 16, w), xt = fos_tensor_2d(FOS_DTYPE_BF16, 4, 16, x);
	fos_tensor y = fos_tensor_out();
	if (fos_put_weight(c, "ones", 1, &wt, NULL, NULL, &st) || fos_forward(c, "ones", &xt, NULL, NULL, &y, NULL, &st)) {
		fprintf(stderr, "%s: %s\n", fos_code_name(st.code), st.message);
		return 5;
	}
	if (y.dtype != FOS_DTYPE_BF16 || y.ndim != 2 || y.shape[0] != 4 || y.shape[1] != 16) {
		fprintf(stderr, "Y: dtype %d, ndim %d, shape %lld x %lld\n", y.dtype, y.ndim, (long long)y.shape[0],
			(long long)y.shape[1]);
		return 6;
	}
	for (int i = 0; i < 4 * 16; i++)
		if (((const uint16_t *)y.data)[i] != 0x4180) {
			fprintf(stderr, "Y[%d] = 0x%04x, want 0x4180 (16.0)\n", i, ((const uint16_t *)y.data)[i]);
			return 7;
		}
	free(y.data);
	fos_close(c);
	printf("client: libfos %s, fosd %s (%s), channel header %u bytes, Y = 16.0\n", fos_version(), h.version,
	       h.backend, FOS_CHAN_HDR);
	return 0;
}
EOF
	export PKG_CONFIG_SYSROOT_DIR="$ROOT" PKG_CONFIG_LIBDIR="$ROOT/usr/local/lib/pkgconfig"
	unset PKG_CONFIG_PATH
	flags=$(pkg-config --cflags --libs fos 2>"$T/pc.log")
	pcver=$(pkg-config --modversion fos 2>>"$T/pc.log")
	unset PKG_CONFIG_SYSROOT_DIR PKG_CONFIG_LIBDIR
	CLIENT=""
	sanflags=""
	[ -n "$SANITIZED" ] && sanflags="-fsanitize=address,undefined"
	# shellcheck disable=SC2086
	if [ -z "$flags" ]; then
		bad "pkgconfig_link" "pkg-config --cflags --libs fos: $(cat "$T/pc.log")"
	elif [ "$pcver" != "$VERSION" ]; then
		bad "pkgconfig_link" "pkg-config --modversion fos says '$pcver', fos_version.h $VERSION"
	elif ! cc -std=c11 -Wall -Wextra -Werror $sanflags -o "$T/client" "$T/client.c" $flags >"$T/cc.log" 2>&1; then
		bad "pkgconfig_link" "cc client.c $flags: $(head -5 "$T/cc.log")"
	else
		cneeded=$(readelf -d "$T/client" | sed -n 's/.*(NEEDED).*\[\(.*\)\].*/\1/p' | tr '\n' ' ')
		case " $cneeded" in
		*" $SONAME "*)
			case "$cneeded" in
			*nng* | *protobuf* | *mbed*) bad "pkgconfig_link" "the client needs more than $SONAME: $cneeded" ;;
			*) ok "pkgconfig_link ($flags)"; CLIENT="$T/client" ;;
			esac ;;
		*) bad "pkgconfig_link" "the client does not need $SONAME: $cneeded" ;;
		esac
	fi

	# fosd from the DESTDIR install, cpu backend, on a private socket
	URL="ipc://$T/fosd.sock"
	BIN="$ROOT/usr/local/bin"
	# no HTTP endpoint (as tests/support_server.c): test fosds run side by side, and one on the
	# default metrics port would collide; a fosd whose --help offers no "off" has none by default
	noweb=""
	"$BIN/fosd" --help 2>&1 | grep -q 'off: none' && noweb="--metrics-listen off"
	# shellcheck disable=SC2086
	"$BIN/fosd" --backend cpu --threads 2 --listen "$URL" $noweb >"$T/fosd.log" 2>&1 &
	FOSD_PID=$!
	up=""
	i=0
	while [ $i -lt 150 ]; do
		kill -0 "$FOSD_PID" 2>/dev/null || break
		if "$BIN/fos" --server "$URL" --timeout 2s health >/dev/null 2>&1; then up=1; break; fi
		sleep 0.1
		i=$((i + 1))
	done
	if [ -z "$up" ]; then
		bad "pkgconfig_run" "the installed fosd did not answer within 15 s: $(tail -5 "$T/fosd.log")"
	elif [ -z "$CLIENT" ]; then
		skip "pkgconfig_run" "no client (pkgconfig_link failed)"
	else
		out=$(LD_LIBRARY_PATH="$ROOT/usr/local/lib" "$CLIENT" "$URL" 2>&1)
		rc=$?
		loaded=$(LD_LIBRARY_PATH="$ROOT/usr/local/lib" ldd "$CLIENT" 2>/dev/null | sed -n "s/.*$SONAME => \([^ ]*\).*/\1/p")
		if [ $rc -ne 0 ]; then
			bad "pkgconfig_run" "client exited $rc: $out"
		elif [ "$loaded" != "$ROOT/usr/local/lib/$SONAME" ]; then
			bad "pkgconfig_run" "the client loaded $SONAME from '$loaded', not the DESTDIR install"
		else
			echo "$out"
			ok "pkgconfig_run"
		fi
	fi

	if [ -z "$PYVER" ]; then
		skip "python_import" "no $PY"
	elif [ -n "$SANITIZED" ]; then
		skip "python_import" "a sanitizer build's libfos.so cannot be loaded into $PY"
	elif [ -z "$up" ]; then
		skip "python_import" "no fosd"
	else
		out=$(cd "$T" && env -u FOSD_LIBFOS -u FOS_BUILD PYTHONPATH="$ROOT/$PYSITE" PYTHONDONTWRITEBYTECODE=1 \
			"$PY" -c '
import os, sys
import fosd, fosd._lib as L
root, url, soname, version = sys.argv[1:5]
assert fosd.__file__.startswith(root + "/"), "imported " + fosd.__file__
lib = L.load()
want = os.path.join(root, "usr/local/lib", soname)
assert os.path.realpath(lib._name) == want, "loaded %s, not %s" % (os.path.realpath(lib._name), want)
assert lib.fos_version().decode() == version, lib.fos_version()
with fosd.connect(url) as c:
    h = c.health()
assert h["version"] == version and h["backend"] == "cpu", h
print("python: fosd from %s, libfos %s, fosd %s" % (os.path.dirname(fosd.__file__), os.path.realpath(lib._name), h["version"]))
' "$ROOT" "$URL" "$SONAME" "$VERSION" 2>&1)
		rc=$?
		if [ $rc -eq 0 ]; then
			echo "$out"
			ok "python_import"
		else
			bad "python_import" "$(echo "$out" | tail -3)"
		fi
	fi

	# the installed fosd drains and exits 0 on SIGTERM, with no sanitizer report in its log
	if [ -n "$FOSD_PID" ]; then
		kill -TERM "$FOSD_PID" 2>/dev/null
		wait "$FOSD_PID"
		rc=$?
		FOSD_PID=""
		if [ -z "$up" ]; then
			skip "fosd_stop" "fosd did not start"
		elif [ $rc -ne 0 ] || grep -qE 'AddressSanitizer|LeakSanitizer|runtime error:' "$T/fosd.log"; then
			bad "fosd_stop" "fosd exited $rc on SIGTERM: $(tail -5 "$T/fosd.log")"
		else
			ok "fosd_stop"
		fi
	fi
fi

broken=$(echo "$broken" | sed 's/^ *//')
if [ -n "$FOS_TALLY" ]; then
	echo "$passed $failed $skipped${broken:+ $broken}" >>"$FOS_TALLY"
	echo "-- install: $passed ok / $failed not ok / $skipped skipped"
	exit 0
fi
[ -n "$broken" ] && echo "failing: $broken"
echo "$passed passed, $failed failed, $skipped skipped"
[ "$failed" -eq 0 ]
