#!/usr/bin/env bash
# The one prepared GPU check of flps. On a machine with an NVIDIA GPU and
# nothing but this repository (and the Debian-packaged libraries the build
# needs), it builds what it needs (CMake, no registry installs) and checks,
# in under 8 minutes:
#
#   1. the CUDA path of flps.torch: the CNN of examples/torch/cnn.py with
#      its parameters and data on the GPU (--device cuda, mode gradient),
#      run by flrun with 2 workers, dense and gtopk:0.01, a few hundred
#      iterations each; bars: gtopk within 1.5 points of dense's test
#      accuracy, with at most 3% of its bytes;
#   2. the GPU top-k: flps.torch's TopkSelector on 25M floats at density
#      0.01 against torch.topk alone (on the GPU) and on the CPU;
#   3. energy per training iteration of that CNN read from NVML's energy
#      counter (common/energy.c, through bench/bench_energy), at the clock
#      the GPU runs at; and, only with --allow-clock-change, at its highest
#      supported clock and one about 25% lower (set through NVML, restored
#      at the end, also after a crash from the record in OUTDIR/work).
#
# It writes one JSON report, OUTDIR/gpu-check.json (and its log beside it).
# Without a GPU it stops at the first GPU step with one line and exit 77.
#
# Clocks are left alone unless --allow-clock-change is given: a shared or
# borrowed machine's clocks are not ours to change (a machine lent to a
# session says so in its rules), so the default run measures the clock as
# found and says that the second clock was not tried.
#
# A GPU machine whose image lacks the build's -dev packages (libzmq3-dev,
# libmsgpack-dev, libyaml-dev, libjansson-dev, libmicrohttpd-dev,
# libhiredis-dev, libopenblas-dev, zlib1g-dev) stops at the build with the
# missing one named in the log: build elsewhere and give --build-dir a
# build holding bin/{flrun,flps,flworker,bench_energy} and lib/libflps.so
# (with LD_LIBRARY_PATH naming the libraries they load), and --data a copy
# of Fashion-MNIST where Debian's dataset-fashion-mnist is not installed.
#
# usage: scripts/gpu-check.sh [--build-dir DIR] [--data DIR]
#            [--iterations N] [--allow-clock-change] OUTDIR
#   --build-dir DIR  the build to use (default: build-gpucheck); built when
#                    it lacks a binary the check needs, used as it is else
#   --data DIR       Fashion-MNIST's IDX files (default: Debian's,
#                    /usr/share/datasets/fashion-mnist)
#   --iterations N   per CUDA training run (default 300)
#   PYTHON=...       the Python with CUDA torch (default: python3)
# Exit: 0 every step ran, 1 a step failed (the report says which), 2 usage,
# 77 no GPU here.
set -u

src=$(cd "$(dirname "$0")/.." && pwd)
build="$src/build-gpucheck"
data=/usr/share/datasets/fashion-mnist
iterations=300
allow_clocks=0
out=
while [ $# -gt 0 ]; do
    case $1 in
    --build-dir) build=${2:?--build-dir needs a directory}; shift 2 ;;
    --data) data=${2:?--data needs a directory}; shift 2 ;;
    --iterations) iterations=${2:?--iterations needs a number}; shift 2 ;;
    --allow-clock-change) allow_clocks=1; shift ;;
    -h | --help) sed -n '2,/^set -u/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    -*) echo "gpu-check: unknown option $1 (see --help)" >&2; exit 2 ;;
    *) out=$1; shift ;;
    esac
done
[ -n "$out" ] || { echo "usage: scripts/gpu-check.sh [options] OUTDIR (see --help)" >&2; exit 2; }
mkdir -p "$out/work" || exit 2
out=$(cd "$out" && pwd)
work="$out/work"
log="$out/gpu-check.log"
: >"$log"
PY=$(command -v "${PYTHON:-python3}") || { echo "gpu-check: no ${PYTHON:-python3}" >&2; exit 2; }
start=$SECONDS
budget=470 # seconds for everything, leaving a margin under 8 minutes
failed=0

say() { echo "gpu-check: $*" | tee -a "$log"; }
left() { echo $((budget - (SECONDS - start))); }
# note STEP STATUS MESSAGE: a step's result when it produced none itself.
note() {
    "$PY" -c 'import json, sys; json.dump({"status": sys.argv[2], "message": sys.argv[3]}, open(sys.argv[1], "w"))' \
        "$work/$1.json" "$2" "$3" 2>/dev/null ||
        printf '{"status": "%s"}\n' "$2" >"$work/$1.json"
    [ "$2" = failed ] && failed=1
    say "$1: $2: $3"
}

# --- 1. build (no GPU needed) -------------------------------------------
need="$build/bin/flrun $build/bin/flps $build/bin/bench_energy $build/lib/libflps.so"
missing=0
for f in $need; do [ -e "$f" ] || missing=1; done
if [ "$missing" = 1 ]; then
    say "building flps into $build (log: $log)"
    if ! { cmake -S "$src" -B "$build" -DCMAKE_BUILD_TYPE=Release -DFLPS_TESTS=OFF &&
        cmake --build "$build" -j"$(nproc)" --target flps flps_shard flrun flworker bench_energy; } >>"$log" 2>&1; then
        say "the build failed; the last lines of $log say why (a missing -dev package is named there)"
        exit 1
    fi
fi
bench="$build/bin/bench_energy"

# --- 2. the first GPU step: does NVML list a GPU? -----------------------
list=$("$bench" --list 2>&1)
rc=$?
if [ "$rc" != 0 ] || ! grep -q '"kind":"gpu"' <<<"$list"; then
    # bench_energy's one line, or what its listing says is missing.
    why=$(sed -n -e 's/^no device reports energy: //p' \
        -e 's/.*"why_not_more":"\([^"]*\)".*/\1/p' <<<"$list")
    echo "gpu-check: no GPU here (${why:-$list}); nothing GPU-related was run" | tee -a "$log"
    exit 77
fi
echo "$list" >"$work/devices.json"
say "devices: $list"

# --- 3. does torch see the GPU? -----------------------------------------
if ! cudainfo=$("$PY" "$src/scripts/gpu_check.py" cuda 2>&1); then
    note cuda-dense skipped "$cudainfo"
    note cuda-gtopk skipped "$cudainfo"
    note topk skipped "$cudainfo"
    note energy-default skipped "$cudainfo"
    "$PY" "$src/scripts/gpu_check.py" report "$out" | tee -a "$log"
    exit 1
fi
say "$cudainfo"

# --- 4. flps.torch's CUDA path: the CNN, dense and gtopk:0.01 ----------
cuda_job() { # cuda_job COMPRESSION NAME
    local job="$work/$2.yaml" summary
    cat >"$job" <<EOF
# written by scripts/gpu-check.sh: examples/torch/cnn.py on CUDA
name: gpucheck-$2
model: cnn
workers: 2
servers: 1
iterations: $iterations
batch_size: 32
lr: 0.05
momentum: 0.9
eval_every: 0
compression: $1
data_dir: $data
command: [$PY, examples/torch/cnn.py]
env:
  OMP_NUM_THREADS: "1"
  FLPS_TORCH_DEVICE: cuda
  FLPS_TORCH_MODE: gradient
EOF
    if [ "$(left)" -lt 120 ]; then
        note "$2" skipped "too little of the 8 minutes left"
        return
    fi
    say "$2: flrun $job ($iterations iterations, 2 workers on the GPU)"
    if ! (cd "$src" && timeout "$(($(left) - 90))" "$build/bin/flrun" \
        --log-dir "$work/flrun-$2" "$job") >"$work/$2.out" 2>>"$log"; then
        note "$2" failed "flrun failed; its logs are in $work/flrun-$2"
        return
    fi
    summary=$(tail -n 1 "$work/$2.out")
    if ! "$PY" -c 'import json, sys; json.loads(sys.argv[1])' "$summary" 2>/dev/null; then
        note "$2" failed "no JSON summary from flrun (see $work/$2.out)"
        return
    fi
    echo "$summary" >"$work/$2.json"
    say "$2: $summary"
}
if [ -e "$data/train-images-idx3-ubyte.gz" ]; then
    cuda_job dense cuda-dense
    cuda_job gtopk:0.01 cuda-gtopk
else
    note cuda-dense skipped "no Fashion-MNIST in $data (give --data DIR)"
    note cuda-gtopk skipped "no Fashion-MNIST in $data (give --data DIR)"
fi

# --- 5. the GPU top-k against torch.topk on 25M floats -----------------
if ! timeout 120 "$PY" "$src/scripts/gpu_check.py" topk "$work/topk.json" 2>>"$log" | tee -a "$log"; then
    note topk failed "see $log"
fi

# --- 6. energy per iteration, at the clock found (and two set) ---------
record="$work/gpu-clock.record"
restore() { [ -e "$record" ] && "$bench" --restore "$record" >>"$log" 2>&1; }
trap 'restore' EXIT
energy_at() { # energy_at NAME CLOCK
    if [ "$(left)" -lt 40 ]; then
        note "energy-$1" skipped "too little of the 8 minutes left"
        return
    fi
    say "energy-$1: the CNN on CUDA for 15 s at gpu_clock $2"
    if ! timeout 60 "$bench" --clock "$2" --record "$record" --json "$work/energy-$1.json" -- \
        "$PY" "$src/scripts/gpu_check.py" workload --seconds 15 >>"$log" 2>&1; then
        note "energy-$1" failed "bench_energy failed (see $log)"
        return
    fi
    say "energy-$1: $(tr -d '\n ' <"$work/energy-$1.json")"
}
energy_at default default
if [ "$allow_clocks" = 1 ]; then
    low=$("$PY" -c 'import json, sys; c = json.load(open(sys.argv[1]))["gpu0_clocks_mhz"]; print(min(c, key=lambda f: abs(f - 0.75 * c[0])) if c else "")' "$work/devices.json")
    energy_at max max
    if [ -n "$low" ]; then
        energy_at "$low" "$low"
    else
        note energy-low skipped "NVML lists no supported clock"
    fi
    restore
else
    note energy-other-clocks skipped "clocks left alone: rerun with --allow-clock-change on a machine whose clocks may be changed"
fi

# --- 7. the report -------------------------------------------------------
"$PY" "$src/scripts/gpu_check.py" report "$out" | tee -a "$log"
say "done in $((SECONDS - start)) s"
exit $failed
