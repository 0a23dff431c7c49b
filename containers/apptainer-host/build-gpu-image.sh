#!/usr/bin/env bash
# Builds the GPU runner's apptainer image the way a site builds it for its GPU nodes, and runs
# its CPU path here (no GPU needed):
#   1. the runner-gpu OCI image: scripts/build-images.sh runner-gpu (podman; Debian base, CUDA's
#      user space from PyPI wheels, Open MPI compiled with CUDA support);
#   2. the apptainer image from containers/runner-gpu.def, its `Bootstrap: docker-daemon` read
#      from the image saved as an OCI archive instead (podman has no Docker daemon): a sandbox
#      folder, or with --sif runner-gpu.sif, what a site copies to its nodes (mksquashfs: minutes);
#   3. checks, with the executor's flags plus --nv (as for a GPU run), as the sandbox user: the
#      runtime imports numpy, mpi4py, cupy, numba-cuda and torch; a numba CUDA kernel runs under
#      the simulator (NUMBA_ENABLE_CUDASIM=1); two MPI ranks reduce; Open MPI was built with
#      CUDA support; the image says it serves the gpu queue.
# Prints `key: value` lines (times in s, sizes in MB), the image's path last (`image: …`). The
# apptainer image is made again only when the OCI image changed (its id is kept beside it); one
# build at a time (a lock). Slow from nothing (Open MPI compiles): the suite starts it in the
# background at idle priority (tests/apptainer.py) and checks its outcome last.
#
# Usage: containers/apptainer-host/build-gpu-image.sh [--sif] [--no-build]   (--no-build: checks only)
# Env:   PARAGRADE_APPTAINER_CACHE (default /var/cache/paragrade/apptainer)
# Exit 2: a prerequisite is missing (not root, no podman, no apptainer root file system).
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
CACHE=${PARAGRADE_APPTAINER_CACHE:-/var/cache/paragrade/apptainer}
BIN=${PARAGRADE_APPTAINER_BIN:-$HERE/apptainer}
DEST="$CACHE/runner-gpu"
IMAGE=localhost/paragrade/runner-gpu:latest
BUILD=1 FORM=sandbox
for arg in "$@"; do
  case "$arg" in
    --no-build) BUILD=0 ;;
    --sif) FORM=sif ;;
    *) echo "usage: $0 [--sif] [--no-build]" >&2; exit 64 ;;
  esac
done
OUT="$DEST/$FORM"
[ "$FORM" = sandbox ] || OUT="$DEST/runner-gpu.sif"

log() { echo "apptainer-gpu-image: $*" >&2; }
now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN {printf "%.0f", b - a}'; }
mb() { du -sm "$1" | cut -f1; }
wrap=()
head -c 512 "$BIN" 2>/dev/null | grep -q paragrade-apptainer-host && wrap=(--host-path "$CACHE")

[ "$(id -u)" = 0 ] || { log "building the image needs root"; exit 2; }
"$HERE/build-root.sh" >/dev/null || exit 2
command -v podman >/dev/null || { log "podman is not installed (apt-get install podman runc)"; exit 2; }
export CONTAINERS_CONF=${CONTAINERS_CONF:-$REPO/containers/podman.conf}

mkdir -p "$CACHE"
exec 9>"$CACHE/.gpu-image.lock"
flock 9
if [ "$BUILD" = 1 ]; then
  t0=$(now)
  (cd "$REPO" && PARAGRADE_BUILD_IDLE=${PARAGRADE_BUILD_IDLE:-1} bash scripts/build-images.sh runner-gpu) >&2 ||
    { log "scripts/build-images.sh runner-gpu failed"; exit 1; }
  echo "oci_build_s: $(since "$t0")"
fi
id=$(podman image inspect --format '{{.Id}}' "$IMAGE" 2>/dev/null || true)
if [ "$BUILD" = 1 ] && { [ ! -e "$OUT" ] || [ "$(cat "$OUT.image-id" 2>/dev/null)" != "$id" ]; }; then
  rm -rf "$OUT" "$OUT.image-id" "$DEST/out"
  mkdir -p "$DEST/out/tmp"
  chmod 755 "$DEST"
  t0=$(now)
  podman save --quiet --format oci-archive -o "$DEST/out/runner-gpu.tar" "$IMAGE"
  echo "oci_save_s: $(since "$t0")"
  echo "oci_archive_mb: $(mb "$DEST/out/runner-gpu.tar")"
  # The definition as the repository has it, bootstrapped from the archive.
  sed -e 's|^Bootstrap:.*|Bootstrap: oci-archive|' -e "s|^From:.*|From: $DEST/out/runner-gpu.tar|" \
    "$REPO/containers/runner-gpu.def" >"$DEST/out/runner-gpu.def"
  chown -R 65534:65534 "$DEST/out"  # apptainer builds as the sandbox user
  form=(); [ "$FORM" = sif ] || form=(--sandbox)
  t0=$(now)
  APPTAINER_TMPDIR="$DEST/out/tmp" "$BIN" "${wrap[@]}" --quiet build "${form[@]}" \
    "$DEST/out/image" "$DEST/out/runner-gpu.def" 2>&1 | grep -v 'warn rootless' >&2 || true
  [ -e "$DEST/out/image/.singularity.d" ] || [ -f "$DEST/out/image" ] ||
    { log "apptainer build of the $FORM failed"; exit 1; }
  echo "${FORM}_build_s: $(since "$t0")"
  mv "$DEST/out/image" "$OUT"
  chown -R 0:0 "$OUT"
  chmod -R go-w "$OUT"
  rm -rf "$DEST/out"
  echo "$id" >"$OUT.image-id"
fi
[ -e "$OUT" ] || { log "no $OUT (run without --no-build)"; exit 1; }
echo "oci_image_mb: $(podman image inspect --format '{{.Size}}' "$IMAGE" |
  awk '{printf "%.0f", $1 / 1e6}')"
echo "${FORM}_mb: $(mb "$OUT")"

# The executor's flags (runners/sandbox/apptainer.py) with --nv, the session's environment only.
py=/opt/paragrade/runtime/bin/python
run() {
  "$BIN" --quiet exec --userns --containall --cleanenv --no-home --net --network none --nv \
    --pwd /tmp "$OUT" /usr/bin/env -i PATH=/opt/paragrade/runtime/bin:/opt/openmpi/bin:/usr/bin:/bin \
    LD_LIBRARY_PATH=/opt/openmpi/lib HOME=/tmp "$@" 2>&1 | grep -a -v -i 'could not find any nv'
}
t0=$(now)
run "$py" -c '
import cupy, mpi4py, numba, numba.cuda, numpy, torch
print("imports:", " ".join(f"{m.__name__}=={m.__version__}" for m in (numpy, mpi4py, cupy, numba, torch)))'
echo "first_exec_s: $(since "$t0")"
run env NUMBA_ENABLE_CUDASIM=1 "$py" -c '
import numpy as np
from numba import cuda

@cuda.jit
def double(x, out):
    i = cuda.grid(1)
    if i < x.size:
        out[i] = 2 * x[i]

x = np.arange(64, dtype=np.float64)
out = np.zeros_like(x)
double[2, 32](x, out)
print("numba_cudasim_kernel:", "ok" if np.array_equal(out, 2 * x) else "wrong")'
run mpiexec -n 2 "$py" -c '
from mpi4py import MPI
total = MPI.COMM_WORLD.allreduce(MPI.COMM_WORLD.Get_rank() + 1)
if MPI.COMM_WORLD.Get_rank() == 0:
    print("mpi_allreduce_2_ranks:", "ok" if total == 3 else total, MPI.Get_library_version().split(",")[0])'
run ompi_info --parsable --all | grep -o 'mpi_built_with_cuda_support:value:.*' |
  sed 's/.*:value:/mpi_built_with_cuda_support: /'
"$BIN" --quiet inspect --labels "$OUT" | grep -o 'io.paragrade.queues: .*' | sed 's/^io.paragrade.queues/queues/'
echo "image: $OUT"
