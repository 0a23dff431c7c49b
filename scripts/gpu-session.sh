#!/usr/bin/env bash
# A device session's work in one call: the GPU's share and the 16-core CPU figures side by side,
# on disjoint physical cores (docs/gpu-validation.md, "The next GPU session").
#
#   DEADLINE=560 bash scripts/gpu-session.sh "$OUT"   (repository root, as root, on the GPU node)
#
# Lane A, the GPU and the first half of the physical cores: t3 through the server (the platform
# part of scripts/gpu-check.sh, at most PLATFORM_S seconds), then t3's repeatability until the
# deadline. Lane B, the other half: tests/test_placement.py (its 2-, 4- and 8-core cases), then
# REPEAT_CPU gradings of each of CPU_PACKAGES, each package on its own 2-core slice, all at once
# (a runner whose slots are all busy). Every part writes its own folder under OUTDIR; the digest
# at the end reads the gradings that finished, so a call cut short still reports what it did.
# OUTDIR ends as OUTDIR.tgz beside OUTDIR/session.txt: the device tool brings back 8 files at most.
set -uo pipefail
out=${1:-${OUT:-/tmp/gpu-session}}
mkdir -p "$out"
trap 'tar czf "$out.tgz" -C "$(dirname "$out")" "$(basename "$out")" && find "$out" -mindepth 1 ! -name session.txt -delete' EXIT
end=${DEADLINE:-560}
export PYTHONUNBUFFERED=1 PARAGRADE_TIMING_BUDGET_S=${PARAGRADE_TIMING_BUDGET_S:-15}
packages=(${CPU_PACKAGES:-treasure-hunt/t1-multiprocessing treasure-hunt/t2-mpi parallel-python/numba-parallel})
stamp() { printf '=== %s (%d s in)\n' "$*" "$SECONDS" | tee -a "$out/session.txt"; }

lscpu > "$out/lscpu.txt"
# Lanes by physical core (lscpu's CORE), so that no lane shares a core's threads with the other.
read -r lane_a lane_b slices < <(lscpu -p=CPU,CORE,SOCKET | grep -v '^#' | python3 -c '
import collections, sys
cores = collections.defaultdict(list)
for line in sys.stdin:
    cpu, core, socket = map(int, line.split(",")[:3])
    cores[socket, core].append(cpu)
phys = [sorted(c) for _, c in sorted(cores.items())]
half = len(phys) // 2
a = [c for p in phys[:half] for c in p]
b = [c for p in phys[half:] for c in p]
first = [p[0] for p in phys[half:]]  # one thread of each core: a slice of two whole cores
print(",".join(map(str, a)), ",".join(map(str, b)),
      ";".join(f"{x},{y}" for x, y in zip(first[::2], first[1::2])))')
IFS=';' read -r -a slice <<< "$slices"
[ ${#slice[@]} -gt 0 ] || slice=("$lane_b")   # a node of two cores: lane B's one core
stamp "lane A (GPU) on cpus $lane_a; lane B on cpus $lane_b, 2-core slices ${slice[*]}"

stamp "the node and the dependencies (gpu-check.sh, every part skipped)"
SKIP_ENGINE=1 SKIP_PLATFORM=1 bash scripts/gpu-check.sh "$out/deps" > /dev/null 2>&1
grep -E "sandbox backend|CUDA_HOME=|numba-cuda outside|NVIDIA|Python" "$out/deps/log.txt" | tee -a "$out/session.txt"
# What gpu-check.sh sets inside itself, for the test that runs without it: the node's python3 as
# the sandbox runtime, and bwrap where it starts.
PARAGRADE_RUNTIME_DIR=$(dirname "$(dirname "$(command -v python3)")")
PARAGRADE_BACKEND=$(sed -n 's/^sandbox backend: //p' "$out/deps/log.txt")
export PARAGRADE_RUNTIME_DIR PARAGRADE_BACKEND=${PARAGRADE_BACKEND:-process}

check() {   # FOLDER CPUS SECONDS, then gpu-check.sh's variables: one part of it on CPUS
  local dir=$1 cpus=$2 s=$3; shift 3
  [ "$s" -ge 30 ] || { stamp "$dir skipped: $s s left"; return 0; }
  stamp "$dir on cpus $cpus, $s s at most"
  taskset -c "$cpus" env "$@" DEADLINE="$s" bash scripts/gpu-check.sh "$out/$dir" > /dev/null 2>&1
  stamp "$dir done"
}
left() { echo $(( end - SECONDS - ${1:-0} )); }

(   # lane A
  s=$(left); check platform-t3 "$lane_a" $(( s < ${PLATFORM_S:-300} ? s : ${PLATFORM_S:-300} )) \
    SKIP_ENGINE=1 TASKS=t3-cuda
  check repeat-t3 "$lane_a" "$(left)" SKIP_ENGINE=1 SKIP_PLATFORM=1 REPEAT=${REPEAT_T3:-20} \
    REPEAT_PACKAGES=treasure-hunt/t3-cuda
) &
lane=$!
(   # lane B
  stamp "placement on cpus $lane_b"
  taskset -c "$lane_b" timeout "$(left)" python3 -m pytest -q -p no:cacheprovider -o timeout=0 \
    tests/test_placement.py > "$out/placement.txt" 2>&1
  tail -3 "$out/placement.txt" | tee -a "$out/session.txt"
  for i in "${!packages[@]}"; do
    p=${packages[i]}
    check "repeat-${p#*/}" "${slice[i % ${#slice[@]}]}" "$(left)" SKIP_ENGINE=1 SKIP_PLATFORM=1 \
      PARAGRADE_GPU_MODE=none REPEAT=${REPEAT_CPU:-10} REPEAT_PACKAGES="$p" &
    [ $(( (i + 1) % ${#slice[@]} )) = 0 ] && wait   # more packages than slices: one round at a time
  done
  # a free slice: the same-cores experiment (../shared/experiments, carried in .dev/) beside them
  if [ ${#slice[@]} -gt ${#packages[@]} ] && [ -e .dev/symmetric_ratio.py ]; then
    taskset -c "${slice[-1]}" timeout "$(left)" python3 .dev/symmetric_ratio.py 3000000 150 \
      > "$out/symmetric_ratio.txt" 2>&1
  fi
  wait
) &
wait $lane
wait

stamp digest
python3 - "$out" <<'EOF' | tee -a "$out/session.txt"
import pathlib, re, statistics, sys
line = re.compile(r"^(\S+) grading \d+ .*: speedup ([\d.]+) \[([\d.]+), ([\d.]+)\] perf points ([\d.]+)")
for log in sorted(pathlib.Path(sys.argv[1]).glob("repeat-*/log.txt")):
    rows = [m.groups() for m in map(line.match, log.read_text().splitlines()) if m]
    if not rows:
        print(f"{log.parent.name}: no grading finished")
        continue
    sp = [float(r[1]) for r in rows]
    pts = [float(r[4]) for r in rows]
    cv = statistics.stdev(sp) / statistics.mean(sp) if len(sp) > 1 else 0.0
    print(f"{rows[0][0]}: {len(sp)} gradings, speedup median {statistics.median(sp):.3f}, "
          f"CV {cv:.1%}, range {min(sp):.3f}-{max(sp):.3f}; performance points {min(pts):g}-{max(pts):g}")
EOF
for f in "$out"/platform-t3/submit-*.txt; do [ -e "$f" ] && tail -15 "$f"; done
