#!/usr/bin/env bash
# Install what is missing, build, start a local cluster (redis-server,
# flsched, two flagents on loopback), submit the Fashion-MNIST MLP job with
# global top-k compression (4 workers, 2 parameter servers) with flsubmit,
# watch it to the end, and stop the cluster.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh
scripts/build.sh
JOB="${1:-examples/fmnist-mlp-gtopk.yaml}"
export FLPS_CLUSTER_DIR="${FLPS_CLUSTER_DIR:-$(mktemp -d /tmp/flps-quickstart-XXXXXX)}"
trap 'scripts/cluster.sh down' EXIT
eval "$(scripts/cluster.sh up)"
id=$(build/bin/flsubmit submit "$JOB")
echo "quickstart: submitted $JOB as job $id"
build/bin/flsubmit watch "$id"
build/bin/flsubmit status "$id" --json
