#!/bin/sh
# run-tests.sh: runs each cmocka test binary given, with a time limit each, and sums their
# results into one closing line "N passed, N failed, N skipped". A binary that crashes or times out
# without a cmocka summary counts as one failure. Usage: run-tests.sh BUILD_DIR BINARY...
BUILD="$1"
shift
export FOS_BUILD="$BUILD"
LIMIT="${FOS_TEST_TIMEOUT:-600}"
passed=0; failed=0; skipped=0; broken=""
log=$(mktemp)
for t in "$@"; do
	name=$(basename "$t")
	echo "== $name"
	timeout -k 10 "$LIMIT" "$t" >"$log" 2>&1
	rc=$?
	cat "$log"
	p=$(sed -n 's/^\[  PASSED  \] \([0-9]*\) test.*/\1/p' "$log" | tail -1)
	f=$(sed -n 's/^\[  FAILED  \] \([0-9]*\) test.*/\1/p' "$log" | tail -1)
	s=$(sed -n 's/^\[  SKIPPED \] \([0-9]*\) test.*/\1/p' "$log" | tail -1)
	r=$(sed -n 's/^\[==========\] \([0-9]*\) test(s) run.*/\1/p' "$log" | tail -1)
	if [ -z "$r" ]; then
		echo "!! $name exited $rc without a cmocka summary"
		failed=$((failed + 1)); broken="$broken $name"
		continue
	fi
	passed=$((passed + ${p:-0})); failed=$((failed + ${f:-0})); skipped=$((skipped + ${s:-0}))
	if [ "$rc" -ne 0 ] && [ -z "$f" ]; then
		failed=$((failed + 1)); broken="$broken $name"
	elif [ -n "$f" ]; then
		broken="$broken $name"
	fi
done
rm -f "$log"
[ -n "$broken" ] && echo "failing:$broken"
echo "$passed passed, $failed failed, $skipped skipped"
[ "$failed" -eq 0 ]
