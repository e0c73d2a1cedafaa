#!/bin/sh
# smallm28b-run.sh: issue 28 session 10's device call (carried in .devcarry/smallm28b.tar.xz with
# the stripped binaries under sm28b/): the GPU suites the small-M path touches, every gemm_w4
# variant and probe, ncu of variant 0 and of the warp-specialised form, their SASS. Logs in $OUT.
S=sm28b
export LD_LIBRARY_PATH=$PWD/$S/lib
L=$OUT/all.log
{ date -u; nvidia-smi -L; } > $L 2>&1
echo "=== tests" >> $L
timeout 150 sh tests/run-tests.sh $S $S/tests/gpu_smallm $S/tests/gpu_linear $S/tests/gpu_quant >> $L 2>&1
tail -3 $L
echo "=== variants" >> $L
timeout 120 $S/bench/bench_cuda smallm variants >> $L 2>&1
[ "$1" = fwd ] && { echo "=== forward" >> $L; timeout 120 $S/bench/bench_cuda smallm >> $L 2>&1; }
N="ncu --clock-control none --set full --import-source no -c 1"
timeout 60 $N -k regex:k_w4p -o $OUT/wsp $S/bench/bench_cuda smallm variants first > $OUT/ncu.log 2>&1
timeout 60 $N -k regex:k_w4 -o $OUT/v0 $S/bench/bench_cuda smallm variants first >> $OUT/ncu.log 2>&1
for r in wsp v0; do
	ncu -i $OUT/$r.ncu-rep --page details > $OUT/$r.txt 2>&1
	ncu -i $OUT/$r.ncu-rep --page source --csv --print-source sass > $OUT/${r}_src.csv 2>&1
done
tail -5 $OUT/ncu.log >> $L
cuobjdump -sass $S/bench/bench_cuda 2>&1 | awk '/Function : .*k_w4p|Function : _Z3k_w4ILi1ELi1ELi4ELi1E/{p=1} /Function : /{if(!($0~/k_w4p|_Z3k_w4ILi1ELi1ELi4ELi1E/))p=0} p' > $OUT/sass.txt
date -u >> $L
grep -E "passed|failed" $L | tail -3
grep -E "^\| gemm_w4 variant (0|1|19|20|21|22|23) " $L | grep -v stages | sed 's/ (L2 flushed)//; s/plain bf16 GEMM/bf16/; s/gemm_w4 variant //' | cut -c1-110
grep -E "stages" $L | grep -E "variant 19" | cut -c1-110
grep -E "^\| smallm: (forward, fosd|gemm_w4 alone|X quant)" $L | cut -c1-120
