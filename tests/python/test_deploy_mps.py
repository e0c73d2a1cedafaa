"""test_deploy_mps.py: fosd under NVIDIA MPS by default, as deploy/ starts it, checked on a CPU host
with fake tools (README.md "Sharing a GPU with trainers: MPS"):

* deploy/run-fosd.sh (`make run`), on a PATH of fakes only (nvidia-smi, nvidia-cuda-mps-control,
  pgrep, a fosd script in a fake build directory): no GPU, FOSD_MPS=0 or --backend cpu: nothing
  changes; a GPU and no daemon: a private daemon starts before fosd (its pipe directory in fosd's
  environment, said in the output), is told to quit after fosd exits, fosd's exit status passes
  through, and a TERM to the script reaches fosd; a daemon that answers is used as it is; a
  daemon elsewhere, a missing tool or a fosd built without CUDA: fosd runs without MPS, and the
  output says why; FOSD_RUN_DRY=1 prints the decision and starts nothing.
* deploy/k8s: every manifest is valid YAML; in the Deployment and the DaemonSet fosd's container
  sets CUDA_MPS_PIPE_DIRECTORY to where the in-memory volume `mps` is mounted, and its command,
  run by sh with fakes, starts the control daemon before it execs fosd with the manifest's args
  (and execs fosd all the same without the tool).
"""

import glob
import os
import shutil
import signal
import subprocess
import time

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(REPO, "deploy", "run-fosd.sh")
# what the script and the fakes need from the system; nothing else is on their PATH
SYS_TOOLS = ["sh", "grep", "id", "mkdir", "chmod", "timeout", "head", "cat", "rm", "sleep"]

FAKE_CTL = """#!/bin/sh
echo "ctl $* pipe=$CUDA_MPS_PIPE_DIRECTORY log=$CUDA_MPS_LOG_DIRECTORY" >>"$FAKE_LOG"
if [ "$1" = -d ]; then
	[ -z "$FAKE_CTL_FAIL" ] || exit 1
	: >"$CUDA_MPS_PIPE_DIRECTORY/control"
	exit 0
fi
read -r cmd
echo "ctl-cmd $cmd" >>"$FAKE_LOG"
dir=${CUDA_MPS_PIPE_DIRECTORY:-/tmp/nvidia-mps}
[ -e "$dir/control" ] || { echo "Cannot find MPS control daemon process" >&2; exit 1; }
[ "$cmd" != quit ] || rm -f "$dir/control"
"""
FAKE_SMI = """#!/bin/sh
[ -z "$FAKE_NO_GPU" ] || { echo "No devices were found"; exit 6; }
echo "GPU 0: NVIDIA H200 (UUID: GPU-00010203-0405-0607-0809-0a0b0c0d0e0f)"
"""
FAKE_PGREP = """#!/bin/sh
[ -n "$FAKE_PGREP" ] || exit 1
echo "$FAKE_PGREP"
"""
# a CUDA build's fosd names the CUDA runtime's calls (cudaGetDeviceCount): run-fosd.sh looks for it
FAKE_FOSD = """#!/bin/sh
# %s
echo "fosd $* pipe=${CUDA_MPS_PIPE_DIRECTORY-unset}" >>"$FAKE_LOG"
if [ -n "$FAKE_FOSD_WAIT" ]; then
	trap 'echo fosd-term >>"$FAKE_LOG"; exit 0' TERM
	: >"$FAKE_FOSD_WAIT"
	while :; do sleep 0.05; done
fi
exit 3
"""


def write(path, text, mode=0o755):
    with open(path, "w") as f:
        f.write(text)
    os.chmod(path, mode)


class Host:
    """A temporary directory with fake tools on PATH, a fake build directory and a log of what ran."""

    def __init__(self, tmp, cuda=True, ctl=True):
        self.tmp = str(tmp)
        self.bin = os.path.join(self.tmp, "bin")
        self.build = os.path.join(self.tmp, "build")
        os.makedirs(self.bin)
        os.makedirs(self.build)
        for t in SYS_TOOLS:
            os.symlink(shutil.which(t), os.path.join(self.bin, t))
        write(os.path.join(self.bin, "nvidia-smi"), FAKE_SMI)
        write(os.path.join(self.bin, "pgrep"), FAKE_PGREP)
        if ctl:
            write(os.path.join(self.bin, "nvidia-cuda-mps-control"), FAKE_CTL)
        write(os.path.join(self.build, "fosd"), FAKE_FOSD % ("cudaGetDeviceCount" if cuda else "cpu only"))
        self.log = os.path.join(self.tmp, "log")
        self.mps_dir = os.path.join(self.tmp, "mps")
        self.env = {"PATH": self.bin, "FAKE_LOG": self.log, "FOSD_MPS_DIR": self.mps_dir, "HOME": self.tmp}

    def run(self, *args, **env):
        e = dict(self.env, **env)
        p = subprocess.run(["sh", SCRIPT, self.build] + list(args), env=e, capture_output=True, text=True,
                           timeout=60)
        return p.returncode, p.stdout + p.stderr

    def ran(self):
        try:
            with open(self.log) as f:
                return f.read().splitlines()
        except FileNotFoundError:
            return []


def test_no_gpu_nothing_changes(tmp_path):
    h = Host(tmp_path)
    rc, out = h.run(FAKE_NO_GPU="1")
    assert rc == 3, out  # fosd's status, fosd exec'ed directly
    assert "MPS" not in out
    assert h.ran() == ["fosd --backend auto pipe=unset"]


@pytest.mark.parametrize("args,env", [((), {"FOSD_MPS": "0"}), (("--backend", "cpu"), {}),
                                      ((), {"FOSD_ARGS": "--backend cpu --threads 2"})])
def test_turned_off_or_cpu(tmp_path, args, env):
    h = Host(tmp_path)
    rc, out = h.run(*args, **env)
    assert rc == 3 and "MPS" not in out, out
    assert len(h.ran()) == 1 and h.ran()[0].startswith("fosd --backend auto") and h.ran()[0].endswith("pipe=unset")


def test_private_daemon_for_the_run(tmp_path):
    h = Host(tmp_path)
    pipe = os.path.join(h.mps_dir, "pipe")
    rc, out = h.run("--workers", "3")
    assert rc == 3, out  # fosd's exit status passes through
    assert "started a private control daemon" in out
    assert "export CUDA_MPS_PIPE_DIRECTORY=%s" % pipe in out
    log = os.path.join(h.mps_dir, "log")
    assert h.ran() == [
        "ctl -d pipe=%s log=%s" % (pipe, log),
        "fosd --backend auto --workers 3 pipe=%s" % pipe,
        "ctl  pipe=%s log=%s" % (pipe, log),
        "ctl-cmd quit",
    ]
    assert "told the private control daemon to quit" in out
    assert not os.path.exists(os.path.join(pipe, "control"))
    assert oct(os.stat(h.mps_dir).st_mode & 0o777) == "0o700"


def test_term_reaches_fosd_then_daemon_stops(tmp_path):
    h = Host(tmp_path)
    ready = os.path.join(h.tmp, "fosd-ready")
    p = subprocess.Popen(["sh", SCRIPT, h.build], env=dict(h.env, FAKE_FOSD_WAIT=ready),
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    t0 = time.monotonic()
    while not os.path.exists(ready) and time.monotonic() - t0 < 20:
        time.sleep(0.02)
    assert os.path.exists(ready)
    p.send_signal(signal.SIGTERM)
    out, _ = p.communicate(timeout=30)
    assert p.returncode == 0, out  # fosd drained and exited 0
    pipe, log = os.path.join(h.mps_dir, "pipe"), os.path.join(h.mps_dir, "log")
    assert h.ran()[-3:] == ["fosd-term", "ctl  pipe=%s log=%s" % (pipe, log), "ctl-cmd quit"], h.ran()


def test_running_daemon_is_used(tmp_path):
    h = Host(tmp_path)
    pipe = os.path.join(h.tmp, "site-mps")
    os.makedirs(pipe)
    open(os.path.join(pipe, "control"), "w").close()
    rc, out = h.run(CUDA_MPS_PIPE_DIRECTORY=pipe)
    assert rc == 3 and "the control daemon at %s serves fosd" % pipe in out, out
    assert h.ran() == ["ctl  pipe=%s log=" % pipe, "ctl-cmd get_server_list", "fosd --backend auto pipe=%s" % pipe]


def test_asked_pipe_directory_gets_the_private_daemon(tmp_path):
    h = Host(tmp_path)
    pipe = os.path.join(h.tmp, "mine")
    rc, out = h.run(CUDA_MPS_PIPE_DIRECTORY=pipe)
    assert rc == 3 and "export CUDA_MPS_PIPE_DIRECTORY=%s" % pipe in out, out
    assert h.ran()[0].startswith("ctl -d pipe=%s " % pipe) and h.ran()[-1] == "ctl-cmd quit"


@pytest.mark.parametrize("case,want", [
    ("other", "a control daemon runs on this host (pid 4321)"),
    ("no-ctl", "nvidia-cuda-mps-control is not installed"),
    ("cpu-build", "was built without CUDA"),
    ("ctl-fails", "nvidia-cuda-mps-control -d failed"),
])
def test_without_mps_says_why(tmp_path, case, want):
    h = Host(tmp_path, cuda=case != "cpu-build", ctl=case != "no-ctl")
    env = {"other": {"FAKE_PGREP": "4321"}, "ctl-fails": {"FAKE_CTL_FAIL": "1"}}.get(case, {})
    rc, out = h.run(**env)
    assert rc == 3 and want in out, out
    assert h.ran()[-1] == "fosd --backend auto pipe=unset", h.ran()
    assert "ctl-cmd quit" not in h.ran()


def test_dry_run_starts_nothing(tmp_path):
    h = Host(tmp_path)
    rc, out = h.run("--workers", "3", FOSD_RUN_DRY="1")
    pipe = os.path.join(h.mps_dir, "pipe")
    assert rc == 0, out
    assert "would start a private control daemon (pipe directory %s)" % pipe in out
    assert "would run: CUDA_MPS_PIPE_DIRECTORY=%s %s/fosd --backend auto  --workers 3" % (pipe, h.build) in out
    assert h.ran() == [] and not os.path.exists(h.mps_dir)
    rc, out = h.run(FOSD_RUN_DRY="1", FAKE_NO_GPU="1")
    assert rc == 0 and "MPS" not in out and "would run: %s/fosd --backend auto" % h.build in out


# ---- Kubernetes -------------------------------------------------------------------------------------


def manifests():
    yaml = pytest.importorskip("yaml")
    out = {}
    for f in sorted(glob.glob(os.path.join(REPO, "deploy", "k8s", "**", "*.yaml"), recursive=True)):
        with open(f) as fh:
            out[os.path.relpath(f, REPO)] = [d for d in yaml.safe_load_all(fh) if d]
    return out


def test_manifests_parse():
    m = manifests()
    assert len(m) >= 7 and all(docs for docs in m.values()), sorted(m)


@pytest.mark.parametrize("name", ["deploy/k8s/20-deployment.yaml", "deploy/k8s/multi-gpu/20-daemonset.yaml"])
def test_fosd_container_starts_mps(tmp_path, name):
    (doc,) = manifests()[name]
    spec = doc["spec"]["template"]["spec"]
    (c,) = [c for c in spec["containers"] if c["name"] == "fosd"]
    env = {e["name"]: e["value"] for e in c["env"]}
    mounts = {m["name"]: m["mountPath"] for m in c["volumeMounts"]}
    vols = {v["name"]: v for v in spec["volumes"]}
    assert env["CUDA_MPS_PIPE_DIRECTORY"] == mounts["mps"] == "/run/nvidia-mps"
    assert env["CUDA_MPS_LOG_DIRECTORY"].startswith(mounts["mps"] + "/")
    assert vols["mps"]["emptyDir"]["medium"] == "Memory"
    # the command, as the container runs it, with fakes: daemon first, then fosd with the args
    cmd = c["command"] + c["args"]
    assert cmd[:2] == ["sh", "-c"]
    for with_tool in (True, False):
        h = Host(tmp_path / ("with" if with_tool else "without"), ctl=with_tool)
        os.symlink(os.path.join(h.build, "fosd"), os.path.join(h.bin, "fosd"))
        pipe = os.path.join(h.tmp, "run-nvidia-mps")
        os.makedirs(pipe)
        e = dict(h.env, CUDA_MPS_PIPE_DIRECTORY=pipe, CUDA_MPS_LOG_DIRECTORY=pipe + "/log")
        p = subprocess.run(cmd, env=e, capture_output=True, text=True, timeout=30)
        assert p.returncode == 3, p.stdout + p.stderr
        fosd_line = "fosd --config /etc/fosd/config/fosd.conf pipe=%s" % pipe
        if with_tool:
            assert h.ran() == ["ctl -d pipe=%s log=%s/log" % (pipe, pipe), fosd_line]
            assert "MPS control daemon started" in p.stderr and os.path.isdir(pipe + "/log")
        else:
            assert h.ran() == [fosd_line] and "fosd runs without MPS" in p.stderr
