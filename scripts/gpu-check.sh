#!/usr/bin/env bash
# GPU validation: the engine and the whole platform on a node with an NVIDIA GPU.
#
#   bash scripts/gpu-check.sh [OUTDIR]        (from the repository root, as root, on the GPU node)
#
# The node's python3 must hold CuPy, numba, torch and mpi4py (it becomes the sandbox runtime). The
# project's own dependencies come from the environment, or, on a node without a package index,
# from wheels in .whl/ (and bubblewrap from .dev/bwrap, MPICH-matched mpi4py from .dev/mpi/,
# replacements for the node's own packages from .dev/extra/).
# Steps: what the driver tells the grader and t3's sizes (bench.gpu_probe); grade t3's and t4's
# references, the CPU-only answers of tests/fixtures/cheats (t3_*, t4_*) and t3's starter (wrong);
# try Open MPI + UCX's CUDA transports (CUDA_MPI=1: scripts/cuda-mpi-try.sh); validate t3 and t4;
# then start the server with its local runner (serving `gpu`), submit both references as a student
# and wait for the grades. Everything lands in OUTDIR (default $OUT, else /tmp/gpu-check);
# docs/gpu-validation.md records a run. TASKS names the treasure-hunt tasks (default t3 and t4;
# t5-ddp too on a node with two GPUs), SKIP_ENGINE / SKIP_PLATFORM skip a part, REPEAT=N grades
# each package of REPEAT_PACKAGES N times one at a time (bench.speedup_repeatability; BUSY=K adds
# K neighbours, REPEAT_OPTIONS more of its options), and DEADLINE=S (seconds from the start)
# ends every step's timeout there and skips what would start too late. PROBE=0 / STARTER=0 skip the probe / the starter, CHEATS names the
# fixtures tried (default "cpu_loop token_context numpy_sum"), REPEAT_REFERENCE=N grades the first
# task's reference N more times, CPU_RUNNER=1 adds a `cpu,mpi` runner to the platform part, and
# the output ends with a digest line per grading.
# A report of an MPI task on a GPU says how MPI moved device buffers (environment.mpi_gpu_path),
# and its scaling points what the timed calls did on the GPU (`device`, runners/measure/devicework.py).
set -uo pipefail
out=${1:-${OUT:-/tmp/gpu-check}}
mkdir -p "$out"
exec > >(tee "$out/log.txt") 2>&1
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
py=$(command -v python3)
venv=${PARAGRADE_RUNTIME_DIR:-$(dirname "$(dirname "$py")")}   # the sandbox runtime
tasks=${TASKS:-t3-cuda t4-cuda-mpi}
step() { printf '\n=== %s (%s, %d s in)\n' "$*" "$(date +%T)" "$SECONDS"; }
in_time() { [ "$(left 20)" -ge 20 ] || { echo "skipped: DEADLINE is near"; false; }; }
left() { local l=$(( ${DEADLINE:-999999} - SECONDS )); echo $(( l < $1 ? l : $1 )); }  # a step's timeout

step node
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv || echo "no nvidia-smi"
"$py" -V
"$py" -m pip list 2>/dev/null | grep -iE '^(cupy|numba|numba-cuda|torch|mpi4py|mpich|numpy) '

step dependencies
if [ -d .whl ]; then
  "$py" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir .whl/*.whl || exit 1
fi
if compgen -G ".dev/extra/*.whl" >/dev/null; then   # pins the node's image gets wrong (docs/gpu-validation.md)
  "$py" -m pip install -q --no-index --no-deps --no-compile --upgrade .dev/extra/*.whl || exit 1
fi
mpi_ok() { timeout 60 "$venv/bin/mpiexec" -n 2 "$venv/bin/python" -c \
  'from mpi4py import MPI; c = MPI.COMM_WORLD; print(c.allreduce(1), MPI.Get_library_version().splitlines()[0])'; }
if ! mpi_ok && [ -d .dev/mpi ]; then
  echo "mpi4py does not run under $venv/bin/mpiexec: installing the MPICH-ABI mpi4py"
  "$py" -m pip install -q --no-index --no-deps --no-compile --upgrade .dev/mpi/*.whl
  mpi_ok || echo "MPI still does not run: t4 will fail"
fi
# numba-cuda compiles kernels with the toolkit's libnvvm: a GPU sandbox needs to find it.
nvvm=$(find / \( -path /proc -o -path /sys \) -prune -o -name 'libnvvm.so*' -print 2>/dev/null | head -3)
echo "libnvvm found: ${nvvm:-none}; CUDA_HOME=${CUDA_HOME:-unset} -> $(readlink -f "${CUDA_HOME:-/usr/local/cuda}")"
first=$(echo "$nvvm" | head -1)
if [ -n "$first" ]; then
  home=$(readlink -f "$(dirname "$(dirname "$(dirname "$first")")")")
  case $home in /usr/*|"$venv"/*) ;; *) export PARAGRADE_GPU_PATHS="[\"$home\"]" ;; esac
  export CUDA_HOME=$home LD_LIBRARY_PATH=$(dirname "$(readlink -f "$first")")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
fi
echo "CUDA_HOME=${CUDA_HOME:-unset} PARAGRADE_GPU_PATHS=${PARAGRADE_GPU_PATHS:-[]}"
timeout 120 "$venv/bin/python" -c '
import numpy as np
from numba import cuda
@cuda.jit
def twice(x):
    i = cuda.grid(1)
    if i < x.size:
        x[i] *= 2
a = cuda.to_device(np.arange(4.0)); twice[1, 32](a); print("numba-cuda outside the sandbox:", a.copy_to_host())
' 2>&1 | tail -3
backend=process
if ! command -v bwrap >/dev/null && [ -x .dev/bwrap ]; then install -m 755 .dev/bwrap /usr/local/bin/bwrap; fi
if command -v bwrap >/dev/null && bwrap --unshare-all --ro-bind / / true; then backend=bwrap; fi
echo "sandbox backend: $backend"
export PARAGRADE_RUNTIME_DIR=$venv PARAGRADE_GPU_MODE=${PARAGRADE_GPU_MODE:-real} \
  PARAGRADE_BACKEND=$backend
pg() { "$py" -m paragrade.cli "$@"; }

# One grading with the engine alone (no server dependencies): its report in $out/grade-NAME.json,
# its gist printed.
grade() {   # NAME TASK FILE [grade options]
  local name=$1 t=$2 file=$3; shift 3
  step "grade $t: $name"
  in_time || return 0
  timeout "$(left 240)" "$py" -m runners.cli grade "treasure-hunt/$t" "$file" --backend $backend --json "$@" \
    > "$out/grade-$name.json"; echo "exit $?"
  "$py" - "$out/grade-$name.json" <<'EOF'
import json, sys
try:
    r = json.load(open(sys.argv[1]))
except ValueError:
    sys.exit("no report")
s = r.get("speedup") or {}
print(r["verdict"], r["score"], "/", r["max_score"], "speedup", s.get("median"), s.get("ci_low"),
      s.get("ci_high"), "|", r["summary"], "|", r["notes"])
print("credit", json.dumps(r.get("credit")))
for p in r.get("scaling", []):
    print("  scaling", json.dumps(p))
for t in r.get("tests", []):
    if t["outcome"] != "passed":
        print(" ", t["outcome"], t["name"], (t.get("message") or "")[:200])
env = r.get("environment") or {}
print("environment", json.dumps({k: env.get(k) for k in ("gpu", "gpu_mode", "mpi", "mpi_gpu_path",
                                                        "cpu_model", "phases")}))
EOF
}

if [ -z "${SKIP_ENGINE:-}" ]; then
  step "what the driver tells the grader; t3's timed call by input size (bench.gpu_probe)"
  [ "${PROBE:-1}" = 1 ] && in_time && timeout "$(left 150)" "$py" -m bench.gpu_probe "$out/gpu_probe.json"
  for t in $tasks; do
    grade "$t-reference" "$t" "assignments/treasure-hunt/$t/reference/solution.py"
    for cheat in ${CHEATS:-cpu_loop token_context numpy_sum}; do   # tests/fixtures/cheats/tN_NAME.py
      f=tests/fixtures/cheats/${t%%-*}_$cheat.py
      [ -e "$f" ] && grade "$t-$cheat" "$t" "$f"
    done
  done
  lead=${tasks%% *}
  [ "${STARTER:-1}" = 1 ] && grade "$lead-starter" "$lead" \
    "assignments/treasure-hunt/$lead/starter/solution.py" --no-timing
  if [ -n "${CUDA_MPI:-}" ] && [ -d .dev/cuda-mpi ]; then
    step "CUDA-aware MPI: Open MPI's wheel over UCX's CUDA transports"
    in_time && timeout "$(left 240)" bash scripts/cuda-mpi-try.sh "$out"
  fi
  for t in $tasks; do
    step "validate $t"
    in_time || continue
    timeout "$(left 300)" "$py" -m runners.cli assignments validate "assignments/treasure-hunt/$t" \
      --backend $backend --json > "$out/validate-$t.json"; echo "exit $?"
    "$py" -c 'import json, sys; [print(c.get("name"), "ok" if c.get("ok") else c) for c in json.load(open(sys.argv[1]))]' \
      "$out/validate-$t.json" 2>&1 | cut -c1-400
  done
  for i in $(seq "${REPEAT_REFERENCE:-0}"); do   # the first task's reference again, in time
    grade "$lead-reference-$((i + 1))" "$lead" "assignments/treasure-hunt/$lead/reference/solution.py"
  done
  step "digest"
  for f in "$out"/grade-*.json; do
    "$py" - "$f" <<'EOF'
import json, sys
try:
    r = json.load(open(sys.argv[1]))
except ValueError:
    sys.exit(f"{sys.argv[1]}: no report")
s, c = r.get("speedup") or {}, r.get("credit") or {}
dev = [p.get("device") for p in r.get("scaling", []) if p.get("device")]
d = dev[-1] if dev else {}
mib = lambda b: None if b is None else round(b / 2**20, 1)
print(sys.argv[1].split("grade-")[-1][:-5], r["verdict"], r["score"], "speedup", s.get("median"),
      f"[{s.get('ci_low')}, {s.get('ci_high')}]", "credit", c.get("status"),
      "device", d and {"on_gpu": f"{d['on_gpu_calls']}/{d['calls']}", "moved_MiB": mib(d["moved_bytes"]),
                       "input_MiB": mib(d["input_bytes"]), "baseline_MiB": mib(d["baseline_moved_bytes"]),
                       "mem_MiB": mib(d["memory_bytes"]), "by": d["counter"]},
      "|", (c.get("reason") or "")[:160])
EOF
  done
fi

if [ -n "${REPEAT:-}" ] && in_time; then
  step "repeatability: $REPEAT gradings of each of ${REPEAT_PACKAGES:=treasure-hunt/t1-multiprocessing}"
  # shellcheck disable=SC2086  # lists of packages and options
  timeout "$(left 36000)" "$py" -m bench.speedup_repeatability "$REPEAT" $REPEAT_PACKAGES ${BUSY:+--busy "$BUSY"} \
    ${REPEAT_OPTIONS:-}
  cp bench/results/speedup_repeatability.* "$out/" 2>/dev/null
fi

[ -n "${SKIP_PLATFORM:-}" ] && exit 0
step platform
# The server and a runner serving `gpu` on half the cores (CPU_RUNNER=1: one serving `cpu,mpi` on
# the other half too, which validates every CPU package while the GPU work is graded).
export PARAGRADE_SERVER_ENVIRONMENT=development PARAGRADE_HEARTBEAT_S=5 PARAGRADE_TIMING_BUDGET_S=10
url=http://127.0.0.1:8765
rm -rf var
! curl -sf $url/healthz >/dev/null || { echo "port 8765 is taken"; exit 1; }
"$py" -m paragrade.cli serve --port 8765 --no-runner > "$out/serve.txt" 2>&1 &
pids=$!
trap 'kill $pids 2>/dev/null; sleep 3; kill -9 $pids 2>/dev/null' EXIT
for _ in $(seq 60); do curl -sf $url/healthz >/dev/null && break; sleep 1; done
half=$(( $(nproc) / 2 ))
runners=("gpu 0-$((half - 1))")
[ -n "${CPU_RUNNER:-}" ] && runners+=("cpu,mpi $half-$(( $(nproc) - 1 ))")
for r in "${runners[@]}"; do
  set -- $r
  PARAGRADE_RUNNER_TOKEN=$(sed -n 's/^runner_token = "\(.*\)"$/\1/p' var/secrets.toml) "$py" -m paragrade.cli runner --server $url --queues "$1" --cpus "$2" \
    --broker "sqla+sqlite:///$PWD/var/broker.sqlite" --name "runner-${1%%,*}" > "$out/runner-${1%%,*}.txt" 2>&1 &
  pids="$pids $!"
done
pg admin create-instructor prof@uni.edu --password orchid-lantern-gravel-41 | tee "$out/instructor.txt"
code=$(sed -n 's/^course treasure-hunt: join code \([A-Za-z0-9_-]*\).*/\1/p' "$out/instructor.txt")
export PARAGRADE_CLIENT_CONFIG=$out/client.json
pg register $url --join-code "$code" --email ada@uni.edu --name Ada --alias ada --password copper-meadow-violin-88
for t in $tasks; do
  step "submit $t reference through the server"
  for _ in $(seq 60); do   # a shipped package serves students once a runner has validated it
    in_time || break
    timeout "$(left 300)" "$py" -m paragrade.cli submit "treasure-hunt/$t" \
      "assignments/treasure-hunt/$t/reference/solution.py" > "$out/submit-$t.txt" 2>&1
    rc=$?
    grep -q "being checked\|waiting for" "$out/submit-$t.txt" || break
    sleep 5
  done
  cat "$out/submit-$t.txt"; echo "exit $rc"
  pg leaderboard "treasure-hunt/$t"
done
token=$(curl -s -X POST $url/api/auth/token -H 'content-type: application/json' \
  -d '{"email":"prof@uni.edu","password":"orchid-lantern-gravel-41"}' | "$py" -c 'import json,sys; print(json.load(sys.stdin)["token"])')
curl -s -H "authorization: Bearer $token" $url/api/fleet > "$out/fleet.json"
"$py" -m json.tool "$out/fleet.json" | head -60
step done
