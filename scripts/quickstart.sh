#!/usr/bin/env bash
# Install what is missing, build, and train the Fashion-MNIST MLP with
# global top-k compression: 4 workers and 2 parameter servers on loopback.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh
scripts/build.sh
exec build/bin/flrun "${1:-examples/fmnist-mlp-gtopk.yaml}"
