#!/bin/sh
# run-fosd.sh: what `make run` runs: fosd from the build directory, in the foreground, on the GPU
# when one is usable (backend auto), else on the CPU. Usage: sh deploy/run-fosd.sh [BUILD [ARGS]]
# Extra fosd flags come after BUILD or in $FOSD_ARGS; Ctrl-C drains and stops it. It listens on
# the development default ipc:///tmp/fosd.sock (mode 0600: this user only), which is also fos's
# default; the systemd unit (deploy/fosd.service) uses ipc:///run/fosd/fosd.sock instead.
BUILD=${1:-build}
[ $# -gt 0 ] && shift
if [ ! -x "$BUILD/fosd" ]; then
	echo "run-fosd.sh: $BUILD/fosd is not built (run make first)" >&2
	exit 1
fi
cat >&2 <<MSG
Starting fosd (default socket ipc:///tmp/fosd.sock; Ctrl-C to stop). From a second terminal try:
  $BUILD/fos health
  $BUILD/fos stats
MSG
# shellcheck disable=SC2086
exec "$BUILD/fosd" --backend auto $FOSD_ARGS "$@"
