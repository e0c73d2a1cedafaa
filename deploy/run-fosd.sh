#!/bin/sh
# run-fosd.sh: what `make run` runs: fosd from the build directory, in the foreground, on the GPU
# when one is usable (backend auto), else on the CPU. Usage: sh deploy/run-fosd.sh [BUILD [ARGS]]
# Extra fosd flags come after BUILD or in $FOSD_ARGS; Ctrl-C drains and stops it. It listens on
# the development default ipc:///tmp/fosd.sock (mode 0600: this user only), which is also fos's
# default; the systemd unit (deploy/fosd.service) uses ipc:///run/fosd/fosd.sock instead.
#
# MPS (README.md "Sharing a GPU with trainers: MPS"): on a GPU host (nvidia-smi -L lists a GPU;
# without nvidia-smi, /dev/nvidia0 exists) with a fosd built with CUDA and not asked for
# --backend cpu, fosd runs under NVIDIA MPS:
#  * an MPS control daemon that answers at $CUDA_MPS_PIPE_DIRECTORY (else CUDA's default
#    /tmp/nvidia-mps) is used as it is;
#  * else, when nvidia-cuda-mps-control is installed and no control daemon runs on the host, a
#    private one is started for this run, its pipe and log directories $CUDA_MPS_PIPE_DIRECTORY and
#    $CUDA_MPS_LOG_DIRECTORY when set, else under $FOSD_MPS_DIR (default /tmp/fosd-mps-UID), and
#    told to quit when fosd exits; trainers join it with the CUDA_MPS_PIPE_DIRECTORY printed;
#  * else fosd runs without MPS, and the output says why.
# Without a GPU nothing changes. FOSD_MPS=0 turns all of this off. FOSD_RUN_DRY=1 prints the
# decision and the command, and runs nothing (tests/test_deploy_mps.c).
BUILD=${1:-build}
[ $# -gt 0 ] && shift
say() { echo "run-fosd.sh: $*" >&2; }
if [ ! -x "$BUILD/fosd" ]; then
	say "$BUILD/fosd is not built (run make first)"
	exit 1
fi
CTL=nvidia-cuda-mps-control
DEFAULT_PIPE=/tmp/nvidia-mps # CUDA's, when CUDA_MPS_PIPE_DIRECTORY is unset

gpu_host() {
	if command -v nvidia-smi >/dev/null 2>&1; then
		nvidia-smi -L 2>/dev/null | grep -q '^GPU '
	else
		[ -e /dev/nvidia0 ]
	fi
}
# a fosd built with CUDA links the CUDA runtime, whose calls it names
cuda_build() { grep -q cudaGetDeviceCount "$BUILD/fosd" 2>/dev/null; }
asks_cpu() {
	case " $FOSD_ARGS $* " in
	*" --backend cpu "* | *" --backend=cpu "*) return 0 ;;
	esac
	return 1
}
# a control daemon answers at pipe directory $1
answers() { [ -e "$1/control" ] && echo get_server_list | CUDA_MPS_PIPE_DIRECTORY=$1 timeout 10 $CTL >/dev/null 2>&1; }
other_daemon() { command -v pgrep >/dev/null 2>&1 && pgrep -x "$CTL" | head -n 1; }

mps_pipe="" # set: the pipe directory of the private daemon this script started
if [ "${FOSD_MPS:-1}" != 0 ] && ! asks_cpu "$@" && gpu_host; then
	pipe=${CUDA_MPS_PIPE_DIRECTORY:-$DEFAULT_PIPE}
	if ! cuda_build; then
		say "MPS: not used: $BUILD/fosd was built without CUDA (make CUDA=1 where nvcc is installed)"
	elif ! command -v $CTL >/dev/null 2>&1; then
		say "MPS: $CTL is not installed: fosd runs without MPS, and a trainer on its GPU pays a switch" \
			"of CUDA contexts at each call (install the driver's MPS tools, e.g. Debian's nvidia-cuda-mps;" \
			"README.md \"Sharing a GPU with trainers: MPS\")"
	elif answers "$pipe"; then
		say "MPS: the control daemon at $pipe serves fosd; trainers join it with CUDA_MPS_PIPE_DIRECTORY=$pipe"
		export CUDA_MPS_PIPE_DIRECTORY="$pipe"
	elif other=$(other_daemon) && [ -n "$other" ]; then
		say "MPS: a control daemon runs on this host (pid $other) with another pipe directory than $pipe:" \
			"fosd runs without MPS; set CUDA_MPS_PIPE_DIRECTORY to that daemon's, or stop it, and run again"
	else
		# a private daemon: in the pipe directory asked for, else in one of this run's
		mps_dir=${FOSD_MPS_DIR:-/tmp/fosd-mps-$(id -u)}
		mps_pipe=${CUDA_MPS_PIPE_DIRECTORY:-$mps_dir/pipe}
		mps_log=${CUDA_MPS_LOG_DIRECTORY:-$mps_dir/log}
		if [ -n "$FOSD_RUN_DRY" ]; then
			say "MPS: would start a private control daemon (pipe directory $mps_pipe)"
			export CUDA_MPS_PIPE_DIRECTORY="$mps_pipe"
		elif mkdir -p "$mps_pipe" "$mps_log" && { [ -n "$CUDA_MPS_PIPE_DIRECTORY" ] || chmod 700 "$mps_dir"; } &&
			CUDA_MPS_PIPE_DIRECTORY="$mps_pipe" CUDA_MPS_LOG_DIRECTORY="$mps_log" $CTL -d; then
			export CUDA_MPS_PIPE_DIRECTORY="$mps_pipe" CUDA_MPS_LOG_DIRECTORY="$mps_log"
			say "MPS: started a private control daemon for this run (stopped when fosd exits); trainers" \
				"on this GPU share it, as this user, with"
			echo "  export CUDA_MPS_PIPE_DIRECTORY=$mps_pipe" >&2
		else
			say "MPS: $CTL -d failed (its log: $mps_log): fosd runs without MPS"
			mps_pipe=""
		fi
	fi
fi

if [ -n "$FOSD_RUN_DRY" ]; then
	echo "would run: ${CUDA_MPS_PIPE_DIRECTORY:+CUDA_MPS_PIPE_DIRECTORY=$CUDA_MPS_PIPE_DIRECTORY }$BUILD/fosd --backend auto $FOSD_ARGS $*"
	exit 0
fi
cat >&2 <<MSG
Starting fosd (default socket ipc:///tmp/fosd.sock; Ctrl-C to stop). From a second terminal try:
  $BUILD/fos health
  $BUILD/fos stats
MSG
if [ -z "$mps_pipe" ]; then
	# shellcheck disable=SC2086
	exec "$BUILD/fosd" --backend auto $FOSD_ARGS "$@"
fi
# With a private daemon the script stays to stop it after fosd. Ctrl-C reaches fosd from the
# terminal (one process group), which drains; a TERM or HUP to the script is passed on.
# shellcheck disable=SC2086
"$BUILD/fosd" --backend auto $FOSD_ARGS "$@" &
pid=$!
trap 'kill -TERM "$pid" 2>/dev/null' TERM HUP
trap ':' INT
while :; do
	wait "$pid"
	rc=$?
	kill -0 "$pid" 2>/dev/null || break # a trap ended the wait, not fosd's exit
done
echo quit | CUDA_MPS_PIPE_DIRECTORY="$mps_pipe" $CTL >/dev/null 2>&1 &&
	say "MPS: told the private control daemon to quit (it ends once its last client does)"
exit "$rc"
