#!/usr/bin/env bash
# bench/overlap.sh: time per iteration of a job with overlap: true and
# overlap: false behind a slowed link, in the same invocation.
#
# It runs bench/cluster/run.sh (network namespaces, tbf-limited veths,
# every process in its own "host"; needs root) once per configuration,
# alternating true, false, true, false... (--repeat pairs), and prints each
# run's seconds per iteration, the split of its time (compute_seconds,
# push_seconds, comm_wait_seconds from flrun's summary) and, as the last
# line of stdout, one JSON object with the medians of both and their ratio
# (overlap on / off: below 1 when overlap wins). See docs/benchmarks.md.
set -euo pipefail

HERE="$(cd "$(dirname "$0")" && pwd)"
PY=/usr/bin/python3
[ -x "$PY" ] || PY="$(command -v python3)"

MODEL=cnn
CODEC=topk:0.01
RATE=100mbit
ITERS=150
WORKERS=2
REPEAT=2
WORK=
DATA_DIR=

usage() {
  cat <<USAGE
usage: sudo bench/overlap.sh [options]
  --model M        mlp or cnn (default $MODEL)
  --codec C        the jobs' compression (default $CODEC)
  --rate R         every link's tc rate (default $RATE)
  --iterations N   iterations per run (default $ITERS)
  --workers W      workers (default $WORKERS; 1 shard)
  --repeat K       pairs of runs, on then off (default $REPEAT)
  --data-dir DIR   Fashion-MNIST directory (default: the job default)
  --work DIR       keep the runs there (default a new /tmp/flb-ovl.*)
Exit 77 when the namespaces cannot be made here (bench/cluster/run.sh --check).
USAGE
}

die() {
  echo "overlap.sh: $*" >&2
  exit 2
}

while [ $# -gt 0 ]; do
  case "$1" in
    --help | -h) usage; exit 0 ;;
    --model) MODEL="$2"; shift ;;
    --codec) CODEC="$2"; shift ;;
    --rate) RATE="$2"; shift ;;
    --iterations) ITERS="$2"; shift ;;
    --workers) WORKERS="$2"; shift ;;
    --repeat) REPEAT="$2"; shift ;;
    --data-dir) DATA_DIR="$2"; shift ;;
    --work) WORK="$2"; shift ;;
    *) usage >&2; die "unknown option '$1'" ;;
  esac
  [ $# -gt 0 ] && shift
done
[[ "$REPEAT" =~ ^[1-9][0-9]*$ ]] || die "--repeat wants a positive integer, not '$REPEAT'"
[[ "$ITERS" =~ ^[1-9][0-9]*$ ]] || die "--iterations wants a positive integer, not '$ITERS'"
# Its own namespace names, so a matrix or the CI test can run beside it.
export FLB_PREFIX="${FLB_PREFIX:-flbo}"
rc=0
"$HERE/cluster/run.sh" --check || rc=$?
[ "$rc" = 0 ] || exit "$rc"
[ -n "$WORK" ] || WORK=$(mktemp -d /tmp/flb-ovl.XXXXXX)
list=
for ((k = 0; k < REPEAT; k++)); do list="$list${list:+,}true,false"; done
# No evaluation inside the timed loop (the final one is outside it).
"$HERE/cluster/run.sh" --models "$MODEL" --codecs "$CODEC" --rates "$RATE" \
  --workers "$WORKERS" --shards 1 --iterations "$ITERS" \
  --eval-every $((ITERS * 10)) --overlap "$list" --probe-seconds 1 \
  --no-record --work "$WORK" ${DATA_DIR:+--data-dir "$DATA_DIR"}

"$PY" "$HERE/overlap_report.py" "$WORK" "$MODEL" "$CODEC" "$RATE" "$WORKERS" "$ITERS"
