#!/bin/sh
# device-check.sh: on the GPU machine, from the repository root, one pass over what a session
# verifies there: the done-word probe, the GPU suites, the suites against a cuda fosd, bench_train.py
# and bench_python_step.py under a private MPS daemon, the Python tests on the machine's own torch,
# and bench_service. Logs go to $OUT (the device tool's
# folder; ./device-out elsewhere). Made here and carried (the device cannot build):
#   make CUDA=1 BUILD=build-dev all && sh bench/stage-device.sh build-dev build-stage
#   cp -r /usr/share/common-licenses build-stage/corpus; tar cJf .devcarry/stage.tar.xz build-stage
# then on the device: sh bench/device-check.sh .devcarry/stage.tar.xz [STEPS]  (STEPS: numbers of the
# steps below, e.g. "0 1 2"; default all)
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
OUT=${OUT:-device-out}; mkdir -p "$OUT"
[ -z "$1" ] || tar xJf "$1" || exit 1
S=build-stage
export LD_LIBRARY_PATH=$PWD/$S/lib
date -u; nvidia-smi -L; git log --oneline -1 2>/dev/null
python3 -c 'import torch; print("torch", torch.__version__, torch.cuda.is_available())'
which nvidia-cuda-mps-control; ls /usr/share/common-licenses 2>&1 | head -2
STEPS=${2:-0 1 2 3 4 5 6}
on() { case " $STEPS " in *" $1 "*) return 0 ;; esac; return 1; }
# a private MPS control daemon for the steps that measure trainers beside fosd (README "Sharing a
# GPU with trainers: MPS"); bench_train.py starts its own
mps_start() { export CUDA_MPS_PIPE_DIRECTORY=/tmp/fos-mps-pipe CUDA_MPS_LOG_DIRECTORY=/tmp/fos-mps-log
	mkdir -p $CUDA_MPS_PIPE_DIRECTORY $CUDA_MPS_LOG_DIRECTORY; nvidia-cuda-mps-control -d; }
mps_stop() { echo quit | nvidia-cuda-mps-control; unset CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY; sleep 1; }
if on 0; then echo "=== 0 probe_wait_value (asynchronous calls' done words, without and under MPS)"; timeout 30 stdbuf -oL -eL $S/bench/probe_wait_value > $OUT/probe.log 2>&1; tail -5 $OUT/probe.log; fi
if on 1; then echo "=== 1 GPU suites"; timeout 200 sh tests/run-tests.sh $S $S/tests/gpu_* > $OUT/gpu.log 2>&1; tail -4 $OUT/gpu.log; fi
if on 2; then echo "=== 2 cuda fosd"; FOS_TEST_BACKEND=cuda timeout 150 sh tests/run-tests.sh $S $S/tests/test_e2e_four_over_six $S/tests/test_libfos_cuda $S/tests/test_libfos_reconnect $S/tests/test_e2e_linear $S/tests/test_cli_cuda_plugin $S/tests/test_cli_four_over_six > $OUT/cudafosd.log 2>&1; tail -4 $OUT/cudafosd.log; fi
if on 3; then echo "=== 3 bench_train"; timeout 170 python3 bench/bench_train.py --build $S --mps --trainers 4 --steps 50 --warmup 10 --corpus $S/corpus --json $OUT/train.json > $OUT/train.log 2>&1; tail -25 $OUT/train.log; fi
if on 4; then echo "=== 4 bench_python_step under MPS"; mps_start; timeout 150 python3 bench/bench_python_step.py --build $S --steps 20 --warmup 5 > $OUT/pystep.log 2>&1; tail -30 $OUT/pystep.log; mps_stop; fi
if on 5; then echo "=== 5 python"; FOS_BUILD=$S timeout ${PYTIME:-200} python3 -m pytest -p no:cacheprovider -q -rfEs ${PYTESTS:-tests/python} > $OUT/py.log 2>&1; tail -15 $OUT/py.log; fi
if on 6; then echo "=== 6 bench_service"; timeout 150 sh -c "$S/bench/bench_nng --out $OUT/nng.txt && $S/bench/bench_service --fosd $S/fosd --baseline $OUT/nng.txt" > $OUT/service.log 2>&1; tail -25 $OUT/service.log; fi
date -u
