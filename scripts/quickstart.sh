#!/usr/bin/env bash
# The README's quick start: install what it needs (scripts/deps.sh
# quickstart), build flps, start a local cluster (redis-server, flsched,
# two flagents on loopback), submit the Fashion-MNIST MLP job with global
# top-k compression (4 workers, 2 parameter servers) with flsubmit, watch it
# with its live progress bar, print its summary, and stop the cluster.
#
#   scripts/quickstart.sh [--json] [JOB]   JOB defaults to examples/fmnist-mlp-gtopk.yaml;
#                                          --json also prints the finished job as one JSON
#                                          line (flsubmit status --json) after the summary
#
# The screen gets progress lines, flsubmit's progress and the summary; the
# rest goes to logs: apt's to $FLPS_DEPS_LOG (default ${TMPDIR:-/tmp}/flps-deps.log),
# the build's to build/quickstart-build.log, the cluster's to
# $FLPS_CLUSTER_DIR (default a new /tmp/flps-quickstart-XXXXXX).
# Exit 0 if the job SUCCEEDED.
set -euo pipefail
cd "$(dirname "$0")/.."

JSON=0
JOB=examples/fmnist-mlp-gtopk.yaml
for a in "$@"; do
  case "$a" in
    --json) JSON=1 ;;
    -h | --help)
      sed -n '2,/^set -euo/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//'
      exit 0
      ;;
    -*)
      echo "quickstart: unknown option $a (usage: $0 [--json] [JOB])" >&2
      exit 2
      ;;
    *) JOB="$a" ;;
  esac
done
say() { echo "quickstart: $*"; }

scripts/deps.sh quickstart

# The tests need Criterion, which the quickstart profile does not install:
# build them only where Criterion is present already (a later scripts/test.sh
# turns them on itself).
flags=()
what="Release into build/"
if ! pkg-config --exists criterion 2>/dev/null; then
  flags=(-DFLPS_TESTS=OFF)
  what="$what, without the tests"
fi
mkdir -p build
BLOG=build/quickstart-build.log
: >"$BLOG"
# Copies the build's output to the log; on a terminal, shows cmake's
# percentage on one line.
progress() {
  local line shown=
  while IFS= read -r line; do
    printf '%s\n' "$line" >>"$BLOG"
    if [ -t 1 ] && [[ $line =~ ^\[\ *([0-9]+)%\] ]] && [ "${BASH_REMATCH[1]}" != "$shown" ]; then
      shown=${BASH_REMATCH[1]}
      printf '\rquickstart: building flps %3s%%' "$shown"
    fi
  done
  if [ -t 1 ]; then printf '\r\033[K'; fi
}
t0=$SECONDS
say "building flps ($what; log: $BLOG)"
if ! scripts/build.sh "${flags[@]+"${flags[@]}"}" 2>&1 | progress; then
  echo "quickstart: the build failed; from $BLOG:" >&2
  if grep -qE ': error:|CMake Error|Error [0-9]' "$BLOG"; then
    grep -E -A4 ': error:|CMake Error' "$BLOG" | head -n 60 >&2
  else
    tail -n 40 "$BLOG" >&2
  fi
  exit 1
fi
say "built in $((SECONDS - t0)) s"

export FLPS_CLUSTER_DIR="${FLPS_CLUSTER_DIR:-$(mktemp -d /tmp/flps-quickstart-XXXXXX)}"
mkdir -p "$FLPS_CLUSTER_DIR"
CLOG="$FLPS_CLUSTER_DIR/cluster.log"
trap 'scripts/cluster.sh down 2>>"$CLOG"' EXIT
if ! up=$(scripts/cluster.sh up 2>>"$CLOG"); then
  echo "quickstart: the local cluster did not start:" >&2
  cat "$CLOG" >&2
  exit 1
fi
eval "$up"
say "local cluster up: redis-server, flsched, flagents n1 and n2 (logs in $FLPS_CLUSTER_DIR)"
# flsubmit's own "submitted ... follow it with" line to the log: the
# script follows it.
if ! id=$(build/bin/flsubmit submit "$JOB" 2>>"$CLOG"); then
  echo "quickstart: flsubmit submit $JOB failed:" >&2
  tail -n 5 "$CLOG" >&2
  exit 1
fi
say "submitted $JOB as job $id"
rc=0
build/bin/flsubmit watch "$id" || rc=$?
if [ "$JSON" = 1 ]; then build/bin/flsubmit status "$id" --json; fi
exit "$rc"
