#!/usr/bin/env bash
# Install the Debian 12 packages flps builds, tests and runs with.
# Idempotent: packages already present are left alone.
set -euo pipefail

PKGS=(
  build-essential cmake pkg-config clang-format
  libzmq3-dev libmsgpack-dev libyaml-dev libjansson-dev zlib1g-dev
  libopenblas-dev libopenblas0 libhiredis-dev libmicrohttpd-dev
  libcurl4-openssl-dev libcriterion-dev prometheus libssl-dev openssl
  redis-server dataset-fashion-mnist
  python3-torch python3-numpy python3-pytest
  libibverbs-dev librdmacm-dev iproute2 gnuplot-nox clang libclang-rt-14-dev
)

missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
# node + npm for tests/deploy/test_chart.sh; a node already installed (with
# its own npm) is kept.
command -v npm >/dev/null 2>&1 || missing+=(nodejs npm)
if [ ${#missing[@]} -eq 0 ]; then
  echo "deps: all ${#PKGS[@]} packages present"
  exit 0
fi
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
echo "deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
