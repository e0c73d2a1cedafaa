#!/bin/sh
# device-check.sh: on the GPU machine, from the repository root, one pass over what a session
# verifies there: the GPU suites, the suites against a cuda fosd, the Python tests on the machine's
# own torch, and bench_train.py under a private MPS daemon. Logs go to $OUT (the device tool's
# folder; ./device-out elsewhere). Made here and carried (the device cannot build):
#   make CUDA=1 BUILD=build-dev all && sh bench/stage-device.sh build-dev build-stage
#   cp -r /usr/share/common-licenses build-stage/corpus; tar cJf .devcarry/stage.tar.xz build-stage
# then on the device: sh bench/device-check.sh .devcarry/stage.tar.xz
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
OUT=${OUT:-device-out}; mkdir -p "$OUT"
[ -z "$1" ] || tar xJf "$1" || exit 1
S=build-stage
export LD_LIBRARY_PATH=$PWD/$S/lib
date -u; nvidia-smi -L; git log --oneline -1 2>/dev/null
python3 -c 'import torch; print("torch", torch.__version__, torch.cuda.is_available())'
which nvidia-cuda-mps-control; ls /usr/share/common-licenses 2>&1 | head -2
echo "=== 0 probe_wait_value (asynchronous calls' done words, without and under MPS)"; timeout 30 $S/bench/probe_wait_value > $OUT/probe.log 2>&1; tail -5 $OUT/probe.log
echo "=== 1 GPU suites"; timeout 200 sh tests/run-tests.sh $S $S/tests/gpu_* > $OUT/gpu.log 2>&1; tail -4 $OUT/gpu.log
echo "=== 2 cuda fosd"; FOS_TEST_BACKEND=cuda timeout 150 sh tests/run-tests.sh $S $S/tests/test_e2e_four_over_six $S/tests/test_libfos_cuda $S/tests/test_libfos_reconnect $S/tests/test_e2e_linear $S/tests/test_cli_cuda_plugin $S/tests/test_cli_four_over_six > $OUT/cudafosd.log 2>&1; tail -4 $OUT/cudafosd.log
echo "=== 3 python"; FOS_BUILD=$S timeout 200 python3 -m pytest -p no:cacheprovider -q -rfEs tests/python > $OUT/py.log 2>&1; tail -15 $OUT/py.log
echo "=== 4 bench_train"; timeout 170 python3 bench/bench_train.py --build $S --mps --trainers 4 --steps 50 --warmup 10 --corpus $S/corpus --json $OUT/train.json > $OUT/train.log 2>&1; tail -25 $OUT/train.log
date -u
