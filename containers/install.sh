#!/usr/bin/env bash
# The one recipe behind every image (Dockerfiles and Apptainer definitions run this same script):
# the sandbox's Python runtime in /opt/paragrade/runtime (world-readable, what submissions import)
# and paragrade itself (the runner or the server) in its own venv, /opt/paragrade/app.
#
# Usage: containers/install.sh PHASE [KIND]   (as root inside the image, the sources in $SRC)
#   PHASE: system   Debian packages: Python, bubblewrap (the same for the server and the CPU
#                   runner, so the engine builds that layer once for both images)
#          app-deps paragrade's dependencies, read from pyproject.toml (no source needed yet;
#                   also shared by both images)
#          runtime  the sandbox runtime (runners only; CPU: pinned by runners/runtime-lock.txt)
#          app      paragrade itself from $SRC, without dependencies (the only step a source
#                   change reruns: the Dockerfiles give each phase its own layer)
#          all      the four in order (Apptainer builds in one step)
#   KIND:  cpu (default) | gpu | server (all but the runtime)
#   TORCH (environment, gpu only): cpu (default) | cuda
# What a build may mount (scripts/build-images.sh does with podman; none of it enters a layer):
#   /wheels              wheels searched first (the host's PyTorch CPU wheel where no index answers)
#   /root/.cache/pip     pip's cache (used only when mounted)
#   /run/build-ca.crt    the CA bundle pip trusts (a proxy that re-signs TLS, as on our machines)
set -euo pipefail
PHASE=${1:?usage: install.sh system|app-deps|runtime|app|all [cpu|gpu|server]}
KIND=${2:-cpu}
SRC=${SRC:-/src}
PY=${PYTHON:-python3}
RUNTIME=/opt/paragrade/runtime
APP=/opt/paragrade/app
export DEBIAN_FRONTEND=noninteractive PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_ROOT_USER_ACTION=ignore
[ -d /root/.cache/pip ] || export PIP_NO_CACHE_DIR=1
[ ! -f /run/build-ca.crt ] || export PIP_CERT=/run/build-ca.crt
case "$KIND" in server|cpu|gpu) ;; *) echo "install.sh: unknown kind $KIND" >&2; exit 2 ;; esac
TORCH=${TORCH:-cpu}  # the GPU runtime's torch: cpu (the lock's build) or cuda (PyPI's)
case "$TORCH" in cpu|cuda) ;; *) echo "install.sh: TORCH is cpu or cuda, not $TORCH" >&2; exit 2 ;; esac

find_links=()
compgen -G '/wheels/*.whl' >/dev/null && find_links=(--find-links /wheels)

system() {
  local pkgs=(ca-certificates procps util-linux bubblewrap)
  # Debian 12: Python 3.11, the same as the bwrap runtime's.
  pkgs+=(python3 python3-venv)
  # GPU: mpi4py is compiled against the image's Open MPI; torch.compile and Triton compile
  # launchers with the system's C compiler at run time.
  [ "$KIND" != gpu ] || pkgs+=(python3-dev gcc libc6-dev)
  apt-get update
  apt-get install -y --no-install-recommends "${pkgs[@]}"
  rm -rf /var/lib/apt/lists/*
}

# A venv with today's pip: Debian's 23.0 cannot read the cache of the pip that filled the host's
# (a build with the host's cache mounted then downloads nothing the host already has).
venv() {
  "$PY" -m venv "$1"
  "$1/bin/pip" install -q "${find_links[@]}" --upgrade pip
}

runtime() {
  [ "$KIND" != server ] || return 0
  venv "$RUNTIME"
  local pip=("$RUNTIME/bin/pip" install "${find_links[@]}")
  if [ "$KIND" = cpu ]; then
    # PyPI's torch is the CUDA build (GBs): the lock pins the CPU build, from PyTorch's index
    # unless a local wheel was mounted.
    [ ${#find_links[@]} -gt 0 ] || pip+=(--extra-index-url https://download.pytorch.org/whl/cpu)
    "${pip[@]}" -c "$SRC/runners/runtime-lock.txt" -r "$SRC/runners/runtime-requirements.txt" \
      -r "$SRC/runners/runtime-requirements-ray.txt"
  else
    # GPU: the CPU runtime's versions (the lock) plus the GPU set, whose CUDA user-space libraries
    # are NVIDIA's wheels (the image has no CUDA toolkit; the node's driver comes in at run time).
    # numba-cuda's cu12 extra: libnvvm, NVRTC and CUDA 12 bindings as wheels (without it, CUDA 13
    # bindings, which older drivers refuse). torch: the lock's CPU build unless TORCH=cuda, PyPI's
    # CUDA build (2.7 GB of wheels for torch 2.14 with its CUDA 13 libraries, a second CUDA beside
    # CuPy's; no shipped GPU package uses torch on the device: DDP trains with gloo on the CPU queue).
    cp "$SRC/runners/runtime-requirements.txt" /tmp/runtime.txt
    cp "$SRC/runners/runtime-lock.txt" /tmp/lock.txt
    # A local wheel folder holds the CPU build: PyPI's CUDA build comes from PyPI only.
    [ "$TORCH" = cpu ] || { sed -i '/^torch==/d' /tmp/lock.txt; pip=("$RUNTIME/bin/pip" install); }
    [ "$TORCH" = cuda ] || [ ${#find_links[@]} -gt 0 ] ||
      pip+=(--extra-index-url https://download.pytorch.org/whl/cpu)
    # CUDA-aware MPI where the image built one: mpi4py against it, not the PyPI MPICH.
    [ -z "${MPI_PREFIX:-}" ] || { sed -i -E '/^(mpich|mpi4py)/d' /tmp/runtime.txt &&
      MPICC="$MPI_PREFIX/bin/mpicc" "${pip[@]}" -c /tmp/lock.txt --no-binary=mpi4py mpi4py; }
    "${pip[@]}" -c /tmp/lock.txt -r /tmp/runtime.txt -r "$SRC/runners/runtime-requirements-gpu.txt" \
      "numba-cuda[cu12]"
  fi
  chmod -R a+rX "$RUNTIME"
  mkdir -p /sub /data /opt/paragrade/harness /run/paragrade
}

app_deps() {
  venv "$APP"
  # The project's dependencies straight from pyproject.toml, so this layer survives source changes.
  "$APP/bin/python" - "$SRC/pyproject.toml" > /tmp/app-requirements.txt <<'EOF'
import sys, tomllib
project = tomllib.load(open(sys.argv[1], "rb"))
print("\n".join([*project["build-system"]["requires"], *project["project"]["dependencies"]]))
EOF
  "$APP/bin/pip" install "${find_links[@]}" -r /tmp/app-requirements.txt
}

app() {
  "$APP/bin/pip" install --no-deps --no-build-isolation "$SRC"
  rm -rf "$SRC/build" "$SRC"/*.egg-info
  ln -sf "$APP/bin/paragrade" /usr/local/bin/paragrade
}

case "$PHASE" in
  system) system ;;
  runtime) runtime ;;
  app-deps) app_deps ;;
  app) app ;;
  all) system; app_deps; runtime; app ;;
  *) echo "install.sh: unknown phase $PHASE" >&2; exit 2 ;;
esac
