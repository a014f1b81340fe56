#!/usr/bin/env bash
# Build the flps container image with podman, without any container
# registry: the Debian 12 base is made here with debootstrap from the host's
# own apt mirror, then the root Dockerfile is built on it.
#
#   scripts/image.sh [build]   install podman/runc/debootstrap if missing,
#                              make the base once, build localhost/flps:VERSION
#   scripts/image.sh smoke     run the built image: flps --version, --help of each binary, non-root
#                              user, a short flrun job to its summary line
#   scripts/image.sh all       build, then smoke
#   scripts/image.sh torch     build a job's own image FROM the built image:
#                              examples/torch/Containerfile (PyTorch from
#                              Debian 12, the CNN example under /opt/job),
#                              tagged FLPS_TORCH_IMAGE; then check that it
#                              imports torch and flps.torch as uid 10001
#   scripts/image.sh base      install podman/runc/debootstrap if missing and make
#                              the Debian 12 base once (for tests/deploy/test_fresh_machine.sh)
#   scripts/image.sh conf FILE write the containers.conf podman needs here to
#                              FILE (for other scripts: CONTAINERS_CONF=FILE)
#
# Environment:
#   FLPS_IMAGE        the tag to build/run (default localhost/flps:VERSION,
#                     VERSION from include/flps.h)
#   FLPS_TORCH_IMAGE  the tag of `torch` (default the image's name with
#                     -torch, e.g. localhost/flps-torch:VERSION)
#   FLPS_BASE_IMAGE   the base image (default localhost/flps-base:bookworm);
#                     made with debootstrap only when podman does not have it
#   WITH_DATASET      1 (default) puts Fashion-MNIST into the image, 0 not
#   NO_CACHE          1 builds every layer again (podman build --no-cache)
#
# podman is driven through a containers.conf of this script's own
# (CONTAINERS_CONF); nothing under /etc is changed. See docs/deploy.md.
set -euo pipefail
cd "$(dirname "$0")/.."

say() { echo "image: $*"; }
die() {
  echo "image: FAILED: $*" >&2
  exit 1
}

version() {
  local maj min pat
  maj=$(sed -n 's/^#define FLPS_VERSION_MAJOR \([0-9]*\)$/\1/p' include/flps.h)
  min=$(sed -n 's/^#define FLPS_VERSION_MINOR \([0-9]*\)$/\1/p' include/flps.h)
  pat=$(sed -n 's/^#define FLPS_VERSION_PATCH \([0-9]*\)$/\1/p' include/flps.h)
  if [ -z "$maj" ] || [ -z "$min" ] || [ -z "$pat" ]; then die "no FLPS_VERSION_* in include/flps.h"; fi
  echo "$maj.$min.$pat"
}

VERSION=$(version)
IMAGE="${FLPS_IMAGE:-localhost/flps:$VERSION}"
BASE_IMAGE="${FLPS_BASE_IMAGE:-localhost/flps-base:bookworm}"
TORCH_IMAGE="${FLPS_TORCH_IMAGE:-${IMAGE%:*}-torch:${IMAGE##*:}}"
WITH_DATASET="${WITH_DATASET:-1}"
NO_CACHE="${NO_CACHE:-0}"
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi

TMP=$(mktemp -d "${TMPDIR:-/tmp}/flps-image.XXXXXX")
CONTAINERS_STARTED=()
cleanup() {
  local c
  for c in "${CONTAINERS_STARTED[@]+"${CONTAINERS_STARTED[@]}"}"; do
    podman rm -f "$c" >/dev/null 2>&1 || true
  done
  if [ -d "$TMP/rootfs" ]; then $SUDO rm -rf "$TMP/rootfs"; fi
  rm -rf "$TMP"
}
trap cleanup EXIT

install_tools() {
  local missing=() p
  for p in podman runc debootstrap; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  say "installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

# podman's defaults do not work in this kind of sandbox (no CAP_SYS_RESOURCE,
# hybrid cgroups crun refuses): rlimits within the host's hard limits, host
# network namespace, runc, cgroupfs, events to a file.
write_containers_conf() {
  local nofile nproc
  nofile=$(ulimit -Hn)
  if [ "$nofile" = unlimited ]; then nofile=1048576; fi
  nproc=$(cat /proc/sys/kernel/pid_max)
  local hard_nproc
  hard_nproc=$(ulimit -Hu)
  if [ "$hard_nproc" != unlimited ] && [ "$hard_nproc" -lt "$nproc" ]; then nproc=$hard_nproc; fi
  cat >"$TMP/containers.conf" <<EOF
[containers]
default_ulimits = [
  "nofile=$nofile:$nofile",
  "nproc=$nproc:$nproc",
]
netns = "host"

[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
events_logger = "file"
EOF
  export CONTAINERS_CONF="$TMP/containers.conf"
}

# apt's own targets, so that no host name is ever written into a file of
# this repository: "URI SUITE COMPONENT" lines.
apt_targets() {
  # shellcheck disable=SC2016 # apt's own $(FIELD) syntax, not the shell's
  apt-get indextargets --format '$(REPO_URI) $(RELEASE) $(COMPONENT)' 'Created-By: Packages' | sort -u
}

make_base() {
  if podman image exists "$BASE_IMAGE"; then
    say "base $BASE_IMAGE already present"
    return 0
  fi
  local mirror t0
  mirror=$(apt_targets | awk '$2 == "bookworm" { print $1; exit }')
  [ -n "$mirror" ] || die "apt knows no mirror for bookworm (apt-get indextargets); is this Debian 12?"
  say "making the Debian 12 base with debootstrap (minbase, about a minute)"
  t0=$SECONDS
  $SUDO debootstrap --variant=minbase bookworm "$TMP/rootfs" "$mirror" >"$TMP/debootstrap.log" 2>&1 ||
    { tail -20 "$TMP/debootstrap.log" >&2; die "debootstrap failed"; }
  # The image's sources: the same archives the host uses, main only.
  apt_targets | awk '{ k = $1 " " $2; if (!(k in seen)) { seen[k] = 1; print "deb " $1 " " $2 " main" } }' |
    $SUDO tee "$TMP/rootfs/etc/apt/sources.list" >/dev/null
  $SUDO rm -rf "$TMP/rootfs/var/cache/apt/"*.bin "$TMP/rootfs/var/cache/apt/archives/"*.deb \
    "$TMP/rootfs/var/lib/apt/lists/"* "$TMP/rootfs/var/log/"*.log
  $SUDO tar -C "$TMP/rootfs" -c . | podman import - "$BASE_IMAGE" >"$TMP/import.log" 2>&1 ||
    die "podman import of the base failed"
  $SUDO rm -rf "$TMP/rootfs"
  say "base $BASE_IMAGE made in $((SECONDS - t0)) s"
}

build() {
  install_tools
  write_containers_conf
  make_base
  local t0=$SECONDS
  say "building $IMAGE (BASE=$BASE_IMAGE, WITH_DATASET=$WITH_DATASET)"
  local cache=()
  if [ "$NO_CACHE" = 1 ]; then cache=(--no-cache); fi
  podman build --network=host --pull=never "${cache[@]+"${cache[@]}"}" \
    --build-arg BASE="$BASE_IMAGE" --build-arg WITH_DATASET="$WITH_DATASET" \
    --build-arg VERSION="$VERSION" \
    -t "$IMAGE" . >"$TMP/build.log" 2>&1 ||
    { tail -40 "$TMP/build.log" >&2; die "podman build failed"; }
  say "built $IMAGE in $((SECONDS - t0)) s ($(podman image inspect --format '{{.Size}}' "$IMAGE" | awk '{ printf "%.0f MB", $1 / 1e6 }'))"
}

# Runs one command in a fresh container of the image; the container is
# removed at once (and by the trap if the script dies meanwhile).
crun() {
  local name="flps-smoke-$$-$RANDOM"
  CONTAINERS_STARTED+=("$name")
  podman run --rm --name "$name" --network=host "$@"
}

smoke() {
  command -v podman >/dev/null || die "podman is not installed; run scripts/image.sh build first"
  write_containers_conf
  podman image exists "$IMAGE" || die "no image $IMAGE; run scripts/image.sh build first"
  local out

  say "smoke: version"
  out=$(crun "$IMAGE" flps --version 2>&1) || die "flps --version failed in the image: $out"
  [ "$out" = "flps $VERSION" ] || die "flps --version printed '$out', not 'flps $VERSION'"
  say "  $out"
  for b in flworker flrun flsubmit flsched flagent; do
    crun "$IMAGE" "$b" --help >/dev/null 2>&1 || die "$b --help failed in the image"
  done
  say "  every binary answers --help"
  out=$(crun "$IMAGE" 2>&1) || die "the default command failed: $out"
  echo "$out" | grep -q '^usage: flsched' || die "the default command is not flsched --help: $out"
  say "  the default command is flsched --help"

  say "smoke: the Python package"
  out=$(crun "$IMAGE" python3 -c 'import flps; print(flps.version())' 2>&1) ||
    die "import flps failed in the image: $out"
  [ "$out" = "$VERSION" ] || die "flps.version() printed '$out', not '$VERSION'"
  say "  import flps: libflps $out"

  say "smoke: user"
  out=$(crun "$IMAGE" id -u) || die "id -u failed"
  [ "$out" != 0 ] || die "the image runs as root"
  [ "$out" = 10001 ] || die "the image runs as uid $out, not 10001"
  say "  runs as uid $out"

  say "smoke: flrun job (mlp, synthetic, 2 workers, 1 server, 30 iterations, topk:0.01)"
  cat >"$TMP/job.yaml" <<'EOF'
name: image-smoke
model: mlp
dataset: synthetic
workers: 2
servers: 1
iterations: 30
compression: topk:0.01
EOF
  chmod 0644 "$TMP/job.yaml"
  chmod 0755 "$TMP"
  # Read-only root file system and a tmpfs /tmp, as the chart runs it.
  out=$(crun --read-only --tmpfs /tmp:rw,size=256m --cap-drop=ALL \
    -v "$TMP/job.yaml:/job/job.yaml:ro" "$IMAGE" flrun --quiet /job/job.yaml 2>&1) ||
    die "flrun failed in the image: $(echo "$out" | tail -20)"
  local summary
  summary=$(echo "$out" | tail -1)
  echo "$summary" | grep -q '"iterations":30' || die "no summary line from flrun: $(echo "$out" | tail -5)"
  say "  summary: $summary"

  if [ "$WITH_DATASET" = 1 ]; then
    say "smoke: flrun on Fashion-MNIST from the image (30 iterations)"
    sed -e 's/^name: .*/name: image-smoke-fmnist/' -e 's/^dataset: .*/dataset: fashion-mnist/' \
      "$TMP/job.yaml" >"$TMP/fmnist.yaml"
    chmod 0644 "$TMP/fmnist.yaml"
    out=$(crun --read-only --tmpfs /tmp:rw,size=256m --cap-drop=ALL \
      -v "$TMP/fmnist.yaml:/job/job.yaml:ro" "$IMAGE" flrun --quiet /job/job.yaml 2>&1) ||
      die "flrun on Fashion-MNIST failed in the image: $(echo "$out" | tail -20)"
    summary=$(echo "$out" | tail -1)
    echo "$summary" | grep -q '"iterations":30' || die "no summary line from flrun: $(echo "$out" | tail -5)"
    say "  summary: $summary"
  fi
  say "smoke: passed"
}

# The per-job image a user would build (docs/deploy.md, "Per-job
# images"): examples/torch/Containerfile with that directory as the
# context, FROM the image built above. A rebuild with nothing changed is a
# cache hit (a second or two); a new flps image builds the PyTorch layer
# again (about 3 minutes, 1 GB).
torch_image() {
  command -v podman >/dev/null || die "podman is not installed; run scripts/image.sh build first"
  write_containers_conf
  podman image exists "$IMAGE" || die "no image $IMAGE; run scripts/image.sh build first"
  local t0=$SECONDS cache=() out before after
  if [ "$NO_CACHE" = 1 ]; then cache=(--no-cache); fi
  before=$(podman image inspect --format '{{.Id}}' "$TORCH_IMAGE" 2>/dev/null || true)
  say "building $TORCH_IMAGE (FROM $IMAGE, examples/torch/Containerfile)"
  podman build --network=host --pull=never "${cache[@]+"${cache[@]}"}" \
    --build-arg FLPS_IMAGE="$IMAGE" -f examples/torch/Containerfile \
    -t "$TORCH_IMAGE" examples/torch >"$TMP/torch.log" 2>&1 ||
    { tail -40 "$TMP/torch.log" >&2; die "podman build of $TORCH_IMAGE failed"; }
  say "built $TORCH_IMAGE in $((SECONDS - t0)) s ($(podman image inspect --format '{{.Size}}' "$TORCH_IMAGE" | awk '{ printf "%.0f MB", $1 / 1e6 }'))"
  # The image this tag named before (a new flps image under it) would stay
  # behind untagged, 1.4 GB each time: removed unless something uses it.
  after=$(podman image inspect --format '{{.Id}}' "$TORCH_IMAGE")
  if [ -n "$before" ] && [ "$before" != "$after" ] &&
    [ -z "$(podman image inspect --format '{{join .RepoTags " "}}' "$before" 2>/dev/null)" ]; then
    podman rmi "$before" >/dev/null 2>&1 || true
  fi
  out=$(crun --read-only --tmpfs /tmp:rw,size=64m --cap-drop=ALL "$TORCH_IMAGE" \
    sh -c 'id -u; python3 -c "import torch, flps.torch; print(torch.__version__)"; ls /opt/job' 2>&1) ||
    die "the torch image cannot import torch and flps.torch: $out"
  [ "$(echo "$out" | sed -n 1p)" = 10001 ] || die "$TORCH_IMAGE runs as uid $(echo "$out" | sed -n 1p), not 10001"
  echo "$out" | grep -qx cnn.py || die "no /opt/job/cnn.py in $TORCH_IMAGE: $out"
  say "  torch $(echo "$out" | sed -n 2p), flps.torch, /opt/job/cnn.py, uid 10001"
}

case "${1:-build}" in
  build) build ;;
  smoke) smoke ;;
  all)
    build
    smoke
    ;;
  torch) torch_image ;;
  base)
    install_tools
    write_containers_conf
    make_base
    ;;
  conf)
    [ -n "${2:-}" ] || die "usage: $0 conf FILE"
    write_containers_conf
    cp "$CONTAINERS_CONF" "$2"
    ;;
  *)
    echo "usage: $0 [build|smoke|all|torch|base|conf FILE]" >&2
    exit 2
    ;;
esac
