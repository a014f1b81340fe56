#!/usr/bin/env bash
# The README's two commands on a fresh Debian 12 machine: a container made
# from a debootstrap minbase Debian 12 (scripts/image.sh base; nothing
# installed beyond it, not even git) gets this working tree (tracked and
# untracked files, not ignored ones such as build/, committed into a new git
# repository of one commit, as a clone would bring it), then, as root:
#
#   1. ./scripts/quickstart.sh runs to its summary: exit 0, "SUCCEEDED",
#      at most 250 packages installed (dpkg's count before and after), and
#      no more than 40 lines on the screen (apt's output goes to a log);
#   2. ./scripts/test.sh with FLPS_TEST_STOP_AFTER=format: its install (git
#      included) and its format check pass, git not having been installed
#      before.
#
# It prints what it measured (packages, MiB downloaded and on disk,
# seconds, lines on the screen). It took 9 minutes on 2 cores (3 for the
# quick start, 5 for test.sh's install) and downloads about 520 MB from the
# Debian mirror apt uses here, so CI does not run it: run it by hand, as
# root, or with FLPS_FRESH_MACHINE=1 scripts/test.sh.
#
#   tests/deploy/test_fresh_machine.sh
#
# Environment:
#   FLPS_BASE_IMAGE  the Debian 12 base (default localhost/flps-base:bookworm,
#                    made by scripts/image.sh base when podman lacks it)
#   KEEP=1           keep the container afterwards (its name is printed)
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
BASE_IMAGE="${FLPS_BASE_IMAGE:-localhost/flps-base:bookworm}"
MAX_PACKAGES=250
MAX_LINES=40

say() { echo "fresh-machine: $*"; }
fail() {
  echo "fresh-machine: FAILED: $*" >&2
  exit 1
}

TMP=$(mktemp -d "${TMPDIR:-/tmp}/flps-fresh.XXXXXX")
NAME="flps-fresh-$$"
STARTED=0
cleanup() {
  if [ "$STARTED" = 1 ]; then
    if [ "${KEEP:-0}" = 1 ]; then
      say "kept the container $NAME (podman rm -f $NAME removes it; CONTAINERS_CONF=$TMP/containers.conf)"
      return 0
    fi
    podman rm -f "$NAME" >/dev/null 2>&1 || true
  fi
  rm -rf "$TMP"
}
trap cleanup EXIT

FLPS_BASE_IMAGE="$BASE_IMAGE" scripts/image.sh base
scripts/image.sh conf "$TMP/containers.conf"
export CONTAINERS_CONF="$TMP/containers.conf"

# The working tree as a repository of one commit: test.sh's format check
# lists the files with git ls-files.
say "copying the working tree ($(git rev-parse --short HEAD), with its uncommitted changes)"
mkdir "$TMP/src"
git ls-files -z --cached --others --exclude-standard |
  while IFS= read -r -d '' f; do if [ -e "$f" ]; then printf '%s\0' "$f"; fi; done |
  tar --null -T - -cf - | tar -C "$TMP/src" -xf -
(
  cd "$TMP/src"
  git init -q
  git add -A
  git -c user.name=flps-test -c user.email=flps-test@localhost commit -q \
    -m "working tree of $(git -C "$ROOT" rev-parse --short HEAD)"
)
chmod 0755 "$TMP"

podman run -d --name "$NAME" --network=host --pull=never \
  -v "$TMP/src:/mnt/src:ro" "$BASE_IMAGE" sleep infinity >/dev/null
STARTED=1
in_box() { podman exec -w /root/flps "$NAME" "$@"; }
podman exec "$NAME" cp -a /mnt/src /root/flps

# "N MIB_ON_DISK MIB_DOWNLOADED": installed packages, their Installed-Size,
# apt's cache of downloaded archives.
measure() {
  in_box sh -c "dpkg-query -W -f='\${db:Status-Abbrev} \${Installed-Size}\n' |
    awk '/^ii/ { n++; kb += \$2 } END { printf \"%d %d \", n, kb / 1024 }'
    du -sm /var/cache/apt/archives | cut -f1"
}

if in_box sh -c 'command -v git' >/dev/null; then fail "git is installed in the base image"; fi
read -r n0 disk0 dl0 <<<"$(measure)"
say "base: $n0 packages, $disk0 MiB, git not installed"

# 1. The quick start, on a terminal (podman exec -t) as a user runs it.
say "1. ./scripts/quickstart.sh"
t0=$SECONDS
rc=0
podman exec -t -w /root/flps "$NAME" ./scripts/quickstart.sh | tee "$TMP/quickstart.out" || rc=$?
secs=$((SECONDS - t0))
[ "$rc" = 0 ] || fail "quickstart.sh exited $rc"
read -r n1 disk1 dl1 <<<"$(measure)"
lines=$(tr -cd '\n' <"$TMP/quickstart.out" | wc -c)
tr -d '\r' <"$TMP/quickstart.out" | grep -q '^Job j[0-9]* (.*) SUCCEEDED$' ||
  fail "no 'Job ... SUCCEEDED' summary line in quickstart.sh's output"
tr -d '\r' <"$TMP/quickstart.out" | tail -n 8 | grep -q '^  test accuracy' ||
  fail "quickstart.sh's output does not end with the summary"
q_pkgs=$((n1 - n0))
say "quickstart: $q_pkgs packages installed ($((dl1 - dl0)) MiB downloaded, $((disk1 - disk0)) MiB on disk), $secs s, $lines lines on the screen, SUCCEEDED"
[ "$q_pkgs" -le "$MAX_PACKAGES" ] || fail "quickstart.sh installed $q_pkgs packages (at most $MAX_PACKAGES)"
[ "$lines" -le "$MAX_LINES" ] || fail "quickstart.sh printed $lines lines (at most $MAX_LINES)"
if in_box sh -c 'command -v git' >/dev/null; then fail "quickstart.sh installed git"; fi

# 2. test.sh's install and format check, git not installed before.
say "2. FLPS_TEST_STOP_AFTER=format ./scripts/test.sh (git not installed)"
t0=$SECONDS
rc=0
podman exec -e FLPS_TEST_STOP_AFTER=format -w /root/flps "$NAME" ./scripts/test.sh 2>&1 |
  tee "$TMP/test.out" || rc=$?
secs=$((SECONDS - t0))
[ "$rc" = 0 ] || fail "test.sh (install and format check) exited $rc"
grep -q '^== stopped after the format check' "$TMP/test.out" ||
  fail "test.sh did not reach the end of its format check"
in_box sh -c 'command -v git' >/dev/null || fail "test.sh's install did not install git"
read -r n2 disk2 dl2 <<<"$(measure)"
lines=$(wc -l <"$TMP/test.out")
say "test.sh install + format check: $((n2 - n1)) more packages ($((dl2 - dl1)) MiB downloaded, $((disk2 - disk1)) MiB on disk; $((n2 - n0)) in all), $secs s, $lines lines on the screen, passed"
say "passed"
