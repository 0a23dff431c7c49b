#!/usr/bin/env bash
# The one recipe behind every image (Dockerfiles and Apptainer definitions run this same script):
# the sandbox's Python runtime in /opt/paragrade/runtime (world-readable, what submissions import)
# and paragrade itself (the runner or the server) in its own venv, /opt/paragrade/app.
#
# Usage: containers/install.sh server|cpu|gpu   (run as root inside the image, sources in $SRC)
set -euo pipefail
KIND=${1:?usage: install.sh server|cpu|gpu}
SRC=${SRC:-/src}
PY=${PYTHON:-python3.11}
export DEBIAN_FRONTEND=noninteractive PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1

apt-get update
apt-get install -y --no-install-recommends ca-certificates procps util-linux
if [ "$KIND" != server ]; then
  apt-get install -y --no-install-recommends bubblewrap
fi
rm -rf /var/lib/apt/lists/*

if [ "$KIND" != server ]; then
  "$PY" -m venv /opt/paragrade/runtime
  RT=/opt/paragrade/runtime/bin/pip
  if [ "$KIND" = cpu ]; then
    # PyPI's torch wheel is the CUDA build (several GB): the CPU image takes the CPU build.
    "$RT" install torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu
  fi
  if [ "$KIND" = gpu ] && [ -n "${MPI_PREFIX:-}" ]; then
    # CUDA-aware MPI: mpi4py built against the image's Open MPI (--with-cuda), not the PyPI MPICH.
    grep -v -E '^(mpich|mpi4py)' "$SRC/runners/runtime-requirements.txt" > /tmp/runtime.txt
    MPICC="$MPI_PREFIX/bin/mpicc" "$RT" install --no-binary=mpi4py mpi4py
  else
    cp "$SRC/runners/runtime-requirements.txt" /tmp/runtime.txt
  fi
  "$RT" install -r /tmp/runtime.txt
  if [ "$KIND" = gpu ]; then
    "$RT" install -r "$SRC/runners/runtime-requirements-gpu.txt"
  else
    "$RT" install -r "$SRC/runners/runtime-requirements-ray.txt"
  fi
  chmod -R a+rX /opt/paragrade
fi

"$PY" -m venv /opt/paragrade/app
/opt/paragrade/app/bin/pip install "$SRC"
ln -sf /opt/paragrade/app/bin/paragrade /usr/local/bin/paragrade
