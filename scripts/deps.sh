#!/usr/bin/env bash
# Install the Debian 12 packages flps needs, by profile:
#
#   scripts/deps.sh quickstart   building flps without its tests (-DFLPS_TESTS=OFF)
#                                and running the local cluster with the built-in C
#                                models on Fashion-MNIST: what scripts/quickstart.sh
#                                needs (about 150 packages on a fresh machine)
#   scripts/deps.sh [test]       everything: the quickstart's packages plus what the
#                                tests, the Python binding, the fuzzers and the chart
#                                checks need, git included (scripts/test.sh; the default)
#
# Idempotent: packages already present are left alone. apt's output goes to
# a log file, $FLPS_DEPS_LOG (default ${TMPDIR:-/tmp}/flps-deps.log); the
# screen gets one line before and one after, and the log's last lines if
# apt fails. Uses sudo when not run as root.
set -euo pipefail

QUICKSTART=(
  build-essential cmake pkg-config
  libzmq3-dev libmsgpack-dev libyaml-dev libjansson-dev zlib1g-dev
  libopenblas-dev libopenblas0 libhiredis-dev libmicrohttpd-dev
  libcurl4-openssl-dev libssl-dev libgnutls28-dev
  redis-server dataset-fashion-mnist python3
)
# What only the tests and the development tools need (zsh: the completion
# test runs the zsh script flsubmit prints); scripts/image.sh
# installs podman, runc and debootstrap itself.
TEST=(
  git clang-format libcriterion-dev prometheus openssl
  python3-torch python3-numpy python3-pytest
  libibverbs-dev librdmacm-dev iproute2 gnuplot-nox clang libclang-rt-14-dev
  zsh
)

PROFILE="${1:-test}"
case "$PROFILE" in
  quickstart) PKGS=("${QUICKSTART[@]}") ;;
  test) PKGS=("${QUICKSTART[@]}" "${TEST[@]}") ;;
  *)
    echo "usage: $0 [quickstart|test]" >&2
    exit 2
    ;;
esac

missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
# node + npm for tests/deploy/test_chart.sh; a node already installed (with
# its own npm) is kept.
if [ "$PROFILE" = test ] && ! command -v npm >/dev/null 2>&1; then missing+=(nodejs npm); fi
if [ ${#missing[@]} -eq 0 ]; then
  echo "deps: all ${#PKGS[@]} packages of the $PROFILE profile present"
  exit 0
fi

LOG="${FLPS_DEPS_LOG:-${TMPDIR:-/tmp}/flps-deps.log}"
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive LC_ALL=C
: >"$LOG"

# Runs one apt command with its output appended to the log; on failure
# shows the log's tail and stops.
logged() {
  echo "+ $*" >>"$LOG"
  "$@" >>"$LOG" 2>&1 && return 0
  local rc=$?
  echo "deps: FAILED ($*, exit $rc); the last lines of $LOG:" >&2
  tail -n 25 "$LOG" >&2
  exit "$rc"
}

t0=$SECONDS
echo "deps: ${#missing[@]} of the ${#PKGS[@]} packages of the $PROFILE profile missing; updating apt's lists (log: $LOG)"
logged $SUDO apt-get update
# apt's own count and sizes, from a dry run that answers no (exit 1).
plan=$($SUDO apt-get install --no-install-recommends --assume-no "${missing[@]}" 2>&1 || true)
echo "$plan" >>"$LOG"
count=$(echo "$plan" | sed -n 's/.* \([0-9][0-9]*\) newly installed.*/\1/p')
get=$(echo "$plan" | sed -n 's/^Need to get \([^ ]* [^ ]*\) of archives.*/\1/p')
disk=$(echo "$plan" | sed -n 's/^After this operation, \([^ ]* [^ ]*\) of additional.*/\1/p')
echo "deps: installing ${count:-?} packages (${get:-?} to download, ${disk:-?} on disk) with apt-get"
logged $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
echo "deps: done in $((SECONDS - t0)) s"
