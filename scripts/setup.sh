#!/bin/sh
# setup.sh — install the Debian 12 packages hvd needs to build, test, run
# its examples and benchmarks (python3-venv: the PyPI environments of
# scripts/venv-tf.sh; slurm-wlm and munge: the one-node Slurm cluster of
# tests/test-launch-slurm.sh). Idempotent: installs only what is missing.
#   scripts/setup.sh          everything (build, tests, Python, benchmark peers)
#   scripts/setup.sh --build  only what the C build needs
#   scripts/setup.sh --demo   the C build and the digits the demo trains on
set -eu
build="build-essential autoconf automake libtool pkg-config libzmq3-dev libprotobuf-c-dev
 protobuf-c-compiler check libsystemd-dev libmicrohttpd-dev libjansson-dev zlib1g-dev"
# scikit-learn's handwritten digits, which examples/ train on
data="python3-sklearn"
extra="python3 python3-dev python3-venv python3-numpy python3-pytest python3-torch python3-torchvision
 openmpi-bin libopenmpi-dev gnuplot-nox iproute2 nftables valgrind procps systemd man-db groff-base clang
 clang-format shellcheck git slurm-wlm munge"
case "${1:-}" in
--build) pkgs=$build ;;
--demo) pkgs="$build $data" ;;
*) pkgs="$build $data $extra" ;;
esac

missing=
for p in $pkgs; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
if [ -z "$missing" ]; then
        echo "setup: all packages present"
        exit 0
fi
echo "setup: installing:$missing"
SUDO=
[ "$(id -u)" -eq 0 ] || SUDO=sudo
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
# shellcheck disable=SC2086 # a list of package names
$SUDO apt-get install -y -qq --no-install-recommends $missing >/dev/null
echo "setup: done"
