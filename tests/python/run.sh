#!/bin/sh
# run.sh: runs the Python tests (tests/python/test_*.py, and tests/proto_client's protocol test
# client) with pytest against BUILD's fosd, fos and libfos.so, and turns pytest's summary into the
# suite's counts:
#   run.sh BUILD [pytest arguments...]
# With FOS_TALLY=FILE (make test) the counts are appended to FILE as one line
# "PASSED FAILED SKIPPED [failing names]" (tests/run-tests.sh --total adds them up) and the
# exit status is 0; alone it prints "N passed, N failed, N skipped" and exits 1 on any failure.
# Errors count as failures, xfailed as skipped, xpassed as passed. pytest finding no test (exit 5),
# being interrupted, a usage or internal error, a timeout, or a missing pytest count as one
# failure named python(...), never as a silent pass. $PYTHON picks the interpreter (default: the
# test environment `make venv` makes, .venv/bin/python (or $VENV's), when it exists, else Debian's
# /usr/bin/python3, whose dist-packages hold python3-pytest, -numpy and -torch).
BUILD="${1:-build}"
shift
case $BUILD in /*) ;; *) BUILD="$(pwd)/$BUILD" ;; esac
HERE=$(dirname "$0")
PY="${PYTHON:-}"
if [ -z "$PY" ]; then
	venv="${VENV:-$HERE/../../.venv}"
	if [ -x "$venv/bin/python" ] && [ -f "$venv/.fosd-installed" ]; then PY="$venv/bin/python"
	elif [ -x /usr/bin/python3 ]; then PY=/usr/bin/python3; else PY=python3; fi
fi
LIMIT="${FOS_TEST_TIMEOUT:-600}"
log=$(mktemp)
echo "== python ($PY, tests/python tests/proto_client)"
if ! "$PY" -c "import pytest" >/dev/null 2>&1; then
	echo "!! $PY has no pytest (apt-get install python3-pytest; deploy/install-deps.sh installs it)" >"$log"
	rc=127
else
	FOS_BUILD="$BUILD" PYTHONDONTWRITEBYTECODE=1 timeout -k 10 "$LIMIT" \
		"$PY" -m pytest -p no:cacheprovider -q -rfEs "$HERE" "$HERE/../proto_client" "$@" >"$log" 2>&1
	rc=$?
fi
cat "$log"
summary=$(grep -E '^=*[ ]*[0-9]+ (passed|failed|skipped|errors?|xfailed|xpassed|deselected)' "$log" | tail -1)
count() { echo "$summary" | grep -oE "[0-9]+ $1" | head -1 | cut -d' ' -f1; }
p=$(count passed); f=$(count failed); e=$(count error); s=$(count skipped)
xf=$(count xfailed); xp=$(count xpassed)
passed=$(( ${p:-0} + ${xp:-0} )); failed=$(( ${f:-0} + ${e:-0} )); skipped=$(( ${s:-0} + ${xf:-0} ))
broken=$(sed -n 's/^\(FAILED\|ERROR\) \([^ ]*\).*/\2/p' "$log" | sed 's/^/python:/' | tr '\n' ' ')
case $rc in
0) ;;
1) [ "$failed" -eq 0 ] && { failed=1; broken="$broken python(exit 1)"; } ;;
5) echo "!! pytest collected no tests"; failed=$((failed + 1)); broken="$broken python(no tests)" ;;
124 | 137) echo "!! pytest ran past ${LIMIT} s"; failed=$((failed + 1)); broken="$broken python(timeout)" ;;
127) failed=$((failed + 1)); broken="$broken python(no pytest)" ;;
*) echo "!! pytest exited $rc"; failed=$((failed + 1)); broken="$broken python(exit $rc)" ;;
esac
rm -f "$log"
broken=$(echo "$broken" | sed 's/^ *//; s/ *$//')
if [ -n "$FOS_TALLY" ]; then
	echo "$passed $failed $skipped${broken:+ $broken}" >>"$FOS_TALLY"
	echo "-- python: $passed ok / $failed not ok / $skipped skipped"
	exit 0
fi
[ -n "$broken" ] && echo "failing: $broken"
echo "$passed passed, $failed failed, $skipped skipped"
[ "$failed" -eq 0 ]
