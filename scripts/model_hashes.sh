#!/usr/bin/env bash
# Print the final model hash and test accuracy (bytes are left out: headers
# and retries make them vary by a few bytes run to run) of a fixed set of short,
# deterministic jobs (every codec, warm-up, overlap on and off, small parts,
# several shards, fedavg, the CNN, a PyTorch command: job), one line each.
# A change that must not alter arithmetic (a refactor, a new message order)
# is checked by running this before and after and diffing the outputs:
#   scripts/model_hashes.sh > before.txt; ...; scripts/model_hashes.sh | diff before.txt -
# Usage: scripts/model_hashes.sh [BUILD_DIR]   (default build/)
set -euo pipefail
cd "$(dirname "$0")/.."
build="${1:-build}"
flrun="$build/bin/flrun"
[ -x "$flrun" ] || { echo "model_hashes: $flrun not built (scripts/build.sh)" >&2; exit 2; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

base() {
  cat <<YAML
model: ${MODEL:-mlp}
dataset: fashion-mnist
partition: ${PARTITION:-iid}
workers: ${WORKERS:-2}
servers: ${SERVERS:-1}
${ITERS-iterations: 60}
batch_size: 32
lr: ${LR:-0.05}
momentum: 0.9
lr_schedule: cosine
seed: 7
eval_every: 0
YAML
}

run() { # NAME EXTRA-YAML...
  local name="$1"; shift
  { echo "name: $name"; base; printf '%s\n' "$@"; } > "$tmp/$name.yaml"
  local out
  if ! out=$("$flrun" --quiet --log-dir "$tmp/logs-$name" "$tmp/$name.yaml" 2>"$tmp/$name.err"); then
    echo "$name FAILED: $(tail -n 1 "$tmp/$name.err")"
    return
  fi
  printf '%s %s\n' "$name" "$(printf '%s\n' "$out" | tail -n 1 |
    /usr/bin/python3 -c 'import json,sys; s=json.loads(sys.stdin.read()); print(s.get("model_hash"), s.get("test_accuracy"))')"
}

run mlp-dense "compression: dense"
run mlp-gtopk "compression: gtopk:0.01"
run mlp-topk "compression: topk:0.01"
LR=0.002 run mlp-randk "compression: randk:0.01"
run mlp-dgc "compression: dgc:0.01"
run mlp-qsgd "compression: qsgd:4"
run mlp-fp16 "compression: fp16"
run mlp-sign "compression: sign"
run mlp-gtopk-warmup "compression: gtopk:0.001" "density_warmup: 30" "density_warmup_start: 0.05"
run mlp-topk-nooverlap "compression: topk:0.01" "overlap: false"
run mlp-dense-nooverlap "compression: dense" "overlap: false"
SERVERS=3 run mlp-gtopk-3s-parts "compression: gtopk:0.02" "part_size: 5000"
SERVERS=2 WORKERS=3 run mlp-dense-2s-parts "compression: dense" "part_size: 20000"
ITERS= PARTITION=dirichlet:0.5 run mlp-fedavg "mode: fedavg" "clients: 6" "client_fraction: 0.5" "rounds: 4" "local_steps: 5" "compression: topk:0.05"
# Four shards beside four workers, encrypted and in the clear: the even map
# with CURVE's and the clear piece (proto/partmap.h) must give one model.
SERVERS=4 WORKERS=4 run mlp-dense-4s "compression: dense"
SERVERS=4 WORKERS=4 run mlp-dense-4s-clear "compression: dense" "encryption: false"
SERVERS=4 WORKERS=4 run mlp-fp16-4s "compression: fp16"
SERVERS=4 WORKERS=4 run mlp-fp16-4s-clear "compression: fp16" "encryption: false"
MODEL=cnn ITERS="iterations: 8" run cnn-gtopk "compression: gtopk:0.01"
if /usr/bin/python3 -c 'import torch' 2>/dev/null; then
  run torch-mlp-gtopk "compression: gtopk:0.01" "command: [/usr/bin/python3, examples/torch/mlp.py]" 'env: {OMP_NUM_THREADS: "1"}'
fi
