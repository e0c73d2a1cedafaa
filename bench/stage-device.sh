#!/bin/sh
# stage-device.sh: builds what the GPU machine runs and copies it, stripped, into one folder to
# carry there (the device has no nng/protobuf-c/libuv/cmocka and cannot run make; these binaries
# link nng, protobuf-c and libuv statically and find cmocka in STAGE/lib):
#   sh bench/stage-device.sh [BUILD] [STAGE]     (defaults: build-dev, build-stage; both git-ignored)
# Then on the device, from the repository root, e.g.:
#   export LD_LIBRARY_PATH=$PWD/STAGE/lib; sh tests/run-tests.sh STAGE STAGE/tests/gpu_quant STAGE/tests/gpu_linear
#   FOS_TEST_BACKEND=cuda sh tests/run-tests.sh STAGE STAGE/tests/test_e2e_linear ...
#   STAGE/bench/bench_cuda; STAGE/bench/bench_nng --out nng.txt; STAGE/bench/bench_service --fosd STAGE/fosd --baseline nng.txt
set -e
BUILD=${1:-build-dev}
STAGE=${2:-build-stage}
T="$BUILD/fosd $BUILD/fos $BUILD/lib/libcmocka.so.0 $BUILD/libfos.so.1"
# fos's CUDA backend plugin (fos --local --backend cuda), beside fos as in a build
[ ! -e "$BUILD/libfos-cuda.so" ] || T="$T $BUILD/libfos-cuda.so"
for b in bench_nng bench_service bench_small_fwd bench_cuda bench_devmem bench_devices bench_linear_step bench_nvfp4_gemm bench_nvfp4_wgmma bench_ctx_switch bench_mma_chain bench_host_cost probe_wait_value; do T="$T $BUILD/bench/$b"; done
for t in gpu_devices gpu_e2e_devmem gpu_device_tensors test_libfos_cuda test_cli_load_device test_e2e_weights_repo gpu_quant gpu_linear gpu_grad_pair gpu_shapes gpu_wcache gpu_smallm gpu_mps gpu_blocks test_e2e_four_over_six test_cli_four_over_six test_libfos_reconnect test_cli_cuda_plugin test_wcache_uses test_linear_shapes test_fault_fairness test_e2e_check test_e2e_chan test_e2e_linear test_e2e_shm test_e2e_lanes test_e2e_metrics test_cli_shm \
	test_cli_remote test_cli_linear test_cli_quantize test_msg_pool; do
	T="$T $BUILD/tests/$t"
done
make BUILD="$BUILD" -j2 $T
rm -rf "$STAGE"
mkdir -p "$STAGE/bench" "$STAGE/tests" "$STAGE/lib"
for f in $T; do
	case $f in
	*libcmocka*) cp -L "$f" "$STAGE/lib/" ;;
	*.so*) cp -L "$f" "$STAGE/" ;;
	*) d="$STAGE/${f#"$BUILD"/}"; cp "$f" "$d"; strip "$d" ;;
	esac
done
ln -sf libfos.so.1 "$STAGE/libfos.so" # the Python package's FOS_BUILD=STAGE finds it
du -sh "$STAGE"
