#!/bin/sh
# install-deps.sh: installs the Debian packages fosd's build and tests need, when any is missing.
# Idempotent and quiet when everything is there; runs as root, or through sudo as a user.
set -e
PKGS="gcc make libc6-dev libnng-dev libmbedtls-dev libprotobuf-c-dev protobuf-c-compiler libuv1-dev libhttp-parser-dev libjansson-dev libcmocka-dev"
# libsystemd-dev: <systemd/sd-daemon.h> for fosd's Type=notify support (libsystemd.so.0 itself is
# opened at run time and only under systemd: server/core/sdnotify.c); systemd: systemd-analyze and
# systemd-sysusers, with which tests/test_deploy_systemd.c checks deploy/fosd.service and fosd.sysusers
PKGS="$PKGS libsystemd-dev systemd"
# the Python package (client/python) and its tests in make test (tests/python.mk; python3-yaml reads
# deploy/k8s's manifests in tests/python/test_deploy_mps.py); FOS_NO_PYTHON=1
# leaves them out (an image that only builds the C programs)
[ "${FOS_NO_PYTHON:-0}" = 1 ] || PKGS="$PKGS python3 python3-numpy python3-pytest python3-torch python3-protobuf python3-prometheus-client python3-yaml"
# python3-venv: make venv (tests/python.mk) builds the test environment of torch 2.x from PyPI, and
# the README's Python steps make one; g++ and python3-dev: torch.compile's CPU backend compiles C++
# against Python.h (test_torch_compile.py)
[ "${FOS_NO_PYTHON:-0}" = 1 ] || PKGS="$PKGS python3-venv python3-dev g++"
# the CUDA backend is built where nvcc exists, and nvcc compiles host code with g++
if command -v nvcc >/dev/null 2>&1 || [ -x /usr/local/cuda/bin/nvcc ]; then
	PKGS="$PKGS g++"
fi
# pkgconf (pkg-config): make test links a client through `pkg-config --cflags --libs fos`
PKGS="$PKGS pkgconf"
missing=""
for p in $PKGS; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
[ -z "$missing" ] && exit 0
echo "install-deps: installing$missing"
if [ "$(id -u)" -eq 0 ]; then
	SUDO=""
elif command -v sudo >/dev/null 2>&1; then
	SUDO="sudo"
else
	echo "install-deps: need root or sudo to install:$missing" >&2
	exit 1
fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
# shellcheck disable=SC2086
$SUDO apt-get install -y -qq --no-install-recommends $missing >/dev/null
echo "install-deps: done"
