#!/usr/bin/env bash
# Builds the GPU runner's apptainer image the way a site builds it for its GPU nodes, and runs
# its CPU path here (no GPU needed):
#   1. the runner-gpu OCI image: scripts/build-images.sh runner-gpu (podman; Debian base, CUDA's
#      user space from PyPI wheels, Open MPI compiled with CUDA support);
#   2. runner-gpu.sif from containers/runner-gpu.def, its `Bootstrap: docker-daemon` read from
#      the image saved as an OCI archive instead (podman has no Docker daemon);
#   3. checks, with the executor's flags plus --nv (as for a GPU run), as the sandbox user: the
#      runtime imports numpy, mpi4py, cupy, numba-cuda and torch; a numba CUDA kernel runs under
#      the simulator (NUMBA_ENABLE_CUDASIM=1); two MPI ranks reduce; Open MPI was built with
#      CUDA support; the image says it serves the gpu queue.
# Prints `key: value` lines (times in s, sizes in MB) and the SIF's path last. Slow (the first
# build compiles Open MPI): not part of the suite's default run; `pytest -m full -k gpu_image`.
#
# Usage: containers/apptainer-host/build-gpu-image.sh [--no-build]   (--no-build: checks only)
# Env:   PARAGRADE_APPTAINER_CACHE (default /var/cache/paragrade/apptainer)
# Exit 2: a prerequisite is missing (not root, no podman, no apptainer root file system).
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
CACHE=${PARAGRADE_APPTAINER_CACHE:-/var/cache/paragrade/apptainer}
BIN=${PARAGRADE_APPTAINER_BIN:-$HERE/apptainer}
DEST="$CACHE/runner-gpu"
SIF="$DEST/runner-gpu.sif"
BUILD=1
[ "${1:-}" != --no-build ] || BUILD=0

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

if [ "$BUILD" = 1 ]; then
  t0=$(now)
  (cd "$REPO" && PARAGRADE_BUILD_IDLE=${PARAGRADE_BUILD_IDLE:-1} bash scripts/build-images.sh runner-gpu) >&2 ||
    { log "scripts/build-images.sh runner-gpu failed"; exit 1; }
  echo "oci_build_s: $(since "$t0")"
  rm -rf "$DEST"
  mkdir -p "$DEST/out/tmp"
  t0=$(now)
  podman save --quiet --format oci-archive -o "$DEST/runner-gpu.tar" localhost/paragrade/runner-gpu:latest
  echo "oci_save_s: $(since "$t0")"
  echo "oci_archive_mb: $(mb "$DEST/runner-gpu.tar")"
  # The definition as the repository has it, bootstrapped from the archive.
  sed -e 's|^Bootstrap:.*|Bootstrap: oci-archive|' -e "s|^From:.*|From: $DEST/runner-gpu.tar|" \
    "$REPO/containers/runner-gpu.def" >"$DEST/runner-gpu.def"
  chmod 644 "$DEST/runner-gpu.tar" "$DEST/runner-gpu.def"
  chmod 755 "$DEST"
  chown -R 65534:65534 "$DEST/out"  # apptainer builds as the sandbox user
  t0=$(now)
  APPTAINER_TMPDIR="$DEST/out/tmp" "$BIN" "${wrap[@]}" --quiet build "$DEST/out/runner-gpu.sif" \
    "$DEST/runner-gpu.def" 2>&1 | grep -v 'warn rootless' >&2 || true
  [ -f "$DEST/out/runner-gpu.sif" ] || { log "apptainer build of the SIF failed"; exit 1; }
  echo "sif_build_s: $(since "$t0")"
  mv "$DEST/out/runner-gpu.sif" "$SIF"
  chown 0:0 "$SIF"
  chmod 644 "$SIF"
  rm -rf "$DEST/out" "$DEST/runner-gpu.tar"
fi
[ -f "$SIF" ] || { log "no $SIF (run without --no-build)"; exit 1; }
echo "oci_image_mb: $(podman image inspect --format '{{.Size}}' localhost/paragrade/runner-gpu:latest |
  awk '{printf "%.0f", $1 / 1e6}')"
echo "sif_mb: $(mb "$SIF")"

# The executor's flags (runners/sandbox/apptainer.py) with --nv, the session's environment only.
py=/opt/paragrade/runtime/bin/python
run() {
  "$BIN" --quiet exec --userns --containall --cleanenv --no-home --net --network none --nv \
    --pwd /tmp "$SIF" /usr/bin/env -i PATH=/opt/paragrade/runtime/bin:/opt/openmpi/bin:/usr/bin:/bin \
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
"$BIN" --quiet inspect --labels "$SIF" | grep -o 'io.paragrade.queues: .*' | sed 's/^io.paragrade.queues/queues/'
echo "sif: $SIF"
