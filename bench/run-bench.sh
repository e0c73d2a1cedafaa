#!/bin/sh
# run-bench.sh: runs every benchmark program in BUILD/bench and prints its report with the machine
# and the date; copy the results into bench/BENCHMARKS.md. Usage: run-bench.sh BUILD_DIR
BUILD="${1:-build}"
echo "# fosd benchmarks, $(date -u '+%Y-%m-%d %H:%M UTC')"
echo "# machine: $(uname -m), $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"
command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | sed 's/^/# gpu: /'
for b in "$BUILD"/bench/bench_*; do
	[ -x "$b" ] || continue
	echo "## $(basename "$b")"
	"$b" || echo "!! $(basename "$b") exited $?"
done
