#!/bin/sh
# smallm28b-run.sh: issue 28 session 10's device call (carried in .devcarry/smallm28b.tar.xz with
# the stripped binaries under sm28b/): the GPU suites the small-M path touches, every gemm_w4
# variant and probe, the forward rows ("fwd"), ncu of the kernels named by regex $2 (first launch:
# 4096x4096 M = 1) with per-instruction stall samples, their SASS. Logs in $OUT.
#   sh sm28b/run.sh [fwd|-] [KREGEX]
S=sm28b
export LD_LIBRARY_PATH=$PWD/$S/lib
L=$OUT/all.log
{ date -u; nvidia-smi -L; } > $L 2>&1
echo "=== tests" >> $L
timeout 150 sh tests/run-tests.sh $S $S/tests/gpu_smallm $S/tests/gpu_linear $S/tests/gpu_quant >> $L 2>&1
echo "=== variants" >> $L
timeout 120 $S/bench/bench_cuda smallm variants >> $L 2>&1
[ "$1" = fwd ] && { echo "=== forward" >> $L; timeout 120 $S/bench/bench_cuda smallm >> $L 2>&1; }
K=${2:-k_w4r}
timeout 60 ncu --clock-control none --set full --import-source no -c 1 -k regex:$K -o $OUT/prof $S/bench/bench_cuda smallm variants first > $OUT/ncu.log 2>&1
ncu -i $OUT/prof.ncu-rep --page details > $OUT/prof.txt 2>&1
ncu -i $OUT/prof.ncu-rep --page source --csv --print-source sass > $OUT/prof_src.csv 2>&1
tail -3 $OUT/ncu.log >> $L
date -u >> $L
grep -E "passed|failed" $L | tail -3
grep -E "^\| gemm_w4 variant (0|1|20|23|24|25) " $L | grep -E "M=(1|16) " | sed 's/ (L2 flushed)//; s/plain bf16 GEMM/bf16/; s/gemm_w4 variant //' | cut -c1-110
grep -E "^\| smallm: (forward|gemm_w4 alone|X quant)" $L | cut -c1-150
