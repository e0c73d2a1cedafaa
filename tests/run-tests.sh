#!/bin/sh
# run-tests.sh: runs each cmocka test binary given, with a time limit each, and sums their
# results into one closing line "N passed, N failed, N skipped". A binary that crashes or times out
# without a cmocka summary counts as one failure.
#   run-tests.sh BUILD_DIR BINARY...   run them; print the closing line; exit 1 on any failure
# With FOS_TALLY=FILE in the environment, the group's sums are appended to FILE as one line
# "PASSED FAILED SKIPPED [failing names]" and a subtotal is printed instead of the closing line
# (exit 0: the failures are in the tally). `make test` runs several groups that way (the unit
# suites, then the sanitizer build) and closes with:
#   run-tests.sh --total FILE          print the one closing line of all groups; exit 1 on failure
if [ "$1" = "--total" ]; then
	passed=0; failed=0; skipped=0; broken=""
	if [ -f "$2" ]; then
		while read -r p f s rest; do
			passed=$((passed + p)); failed=$((failed + f)); skipped=$((skipped + s))
			[ -n "$rest" ] && broken="$broken $rest"
		done <"$2"
	else
		echo "!! no test results in $2"
		failed=1
	fi
	[ -n "$broken" ] && echo "failing:$broken"
	echo "$passed passed, $failed failed, $skipped skipped"
	[ "$failed" -eq 0 ]
	exit
fi
BUILD="$1"
shift
export FOS_BUILD="$BUILD"
LIMIT="${FOS_TEST_TIMEOUT:-600}"
passed=0; failed=0; skipped=0; broken=""
log=$(mktemp)
for t in "$@"; do
	name=$(basename "$t")
	echo "== $name"
	t0=$(date +%s)
	timeout -k 10 "$LIMIT" "$t" >"$log" 2>&1
	rc=$?
	cat "$log"
	echo "-- $name: $(($(date +%s) - t0)) s"
	p=$(sed -n 's/^\[  PASSED  \] \([0-9]*\) test.*/\1/p' "$log" | tail -1)
	f=$(sed -n 's/^\[  FAILED  \] \([0-9]*\) test.*/\1/p' "$log" | tail -1)
	s=$(sed -n 's/^\[  SKIPPED \] \([0-9]*\) test.*/\1/p' "$log" | tail -1)
	r=$(sed -n 's/^\[==========\] \([0-9]*\) test(s) run.*/\1/p' "$log" | tail -1)
	if [ -z "$r" ]; then
		echo "!! $name exited $rc without a cmocka summary"
		failed=$((failed + 1)); broken="$broken $BUILD/$name"
		continue
	fi
	passed=$((passed + ${p:-0})); failed=$((failed + ${f:-0})); skipped=$((skipped + ${s:-0}))
	if [ "$rc" -ne 0 ] && [ -z "$f" ]; then
		# a clean cmocka summary but a bad exit: a sanitizer report at exit (leaks), or a crash
		echo "!! $name exited $rc after its tests"
		failed=$((failed + 1)); broken="$broken $BUILD/$name"
	elif [ -n "$f" ]; then
		broken="$broken $BUILD/$name"
	fi
done
rm -f "$log"
if [ -n "$FOS_TALLY" ]; then
	echo "$passed $failed $skipped$broken" >>"$FOS_TALLY"
	echo "-- $BUILD: $passed ok / $failed not ok / $skipped skipped"
	exit 0
fi
[ -n "$broken" ] && echo "failing:$broken"
echo "$passed passed, $failed failed, $skipped skipped"
[ "$failed" -eq 0 ]
