#!/usr/bin/env bash
# What one apptainer run costs before the program does anything: the median wall time of N runs
# of the runtime's `python -c pass`, per image form (sandbox folder; SIF mounted with squashfuse;
# SIF extracted at every run, --unsquash), with the executor's flags. Run as root, after
# build-image.sh --sif. Prints one line per form.
#
# Usage: containers/apptainer-host/exec-cost.sh [N]   (default 5; PARAGRADE_APPTAINER_IMAGE: another folder)
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
BIN=${PARAGRADE_APPTAINER_BIN:-$HERE/apptainer}
N=${1:-5}
folder=${PARAGRADE_APPTAINER_IMAGE:-$("$HERE/build-image.sh" --path)}
sif="$(dirname "$folder")/runner-cpu.sif"
py=/opt/paragrade/runtime/bin/python
flags=(exec --userns --containall --cleanenv --no-home --net --network none)

median() { sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
timed() {  # label, command...
  local label=$1; shift
  for _ in $(seq "$N"); do
    local t0 t1
    t0=$(date +%s.%N)
    "$@" >/dev/null 2>&1 || { echo "$label: failed" >&2; return; }
    t1=$(date +%s.%N)
    awk -v a="$t0" -v b="$t1" 'BEGIN {printf "%.2f\n", b - a}'
  done | median | sed "s/^/$label: median s over $N runs: /"
}
run() { "$BIN" --quiet "${flags[@]}" "$@" "$py" -c pass; }

timed "no container (the host's runtime, if any)" "$py" -c pass
timed "sandbox folder" run "$folder"
if [ -f "$sif" ]; then
  timed "SIF (squashfuse where it works)" run "$sif"
  timed "SIF --unsquash (extracted every run)" run --unsquash "$sif"
fi
