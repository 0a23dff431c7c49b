"""SLURM batch scripts as submissions: what a student's `sbatch` script may say, and what runs.

A package with `launcher.kind = "sbatch"` takes the course's own form of an MPI task: a batch
script (`#SBATCH --nodes=2`, `srun python task2.py`) beside the program. The script is never run
by a shell. It is read here, on the trusted side, as a request: its `#SBATCH` options may shape
the job within what the package allows (nodes, tasks); those that choose where a job runs on the
course's own cluster (partition, account, GPUs, cores per task, time, log files) are read and
listed as not used here, so that the course's scripts pass as the course writes them. Its body
must be one `srun` (or `mpirun`/`mpiexec`) line that starts one of the submission's Python
files, plus lines that change nothing (comments, `module load`, `echo`, `set -e`,
`cd "$SLURM_SUBMIT_DIR"`). The
platform then starts that program its own way: sandboxes, the package's limits, its ranks on
as many nodes as the script asked for. Anything else is refused with the line that said it.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass

from runners.protocol import Resources

PLACE_OPTIONS = ("partition", "p", "account", "A", "qos", "q", "gres", "gpus", "G",
                 "gpus-per-node", "gpus-per-task", "cpus-per-gpu", "cpus-per-task", "c", "mem",
                 "mem-per-cpu", "mem-per-gpu", "constraint", "C", "reservation", "time", "t",
                 "job-name", "J", "output", "o", "error", "e", "mail-type", "mail-user",
                 "comment", "hint", "cpu-bind", "mpi")
"""Options that choose where and how a job runs on the course's own cluster (its partition,
account, GPUs, cores per task, memory, time, log files): read, listed in the report as not used
here, and left to the runner, whose package sets the limits and the platform keeps the output."""
SHAPE_OPTIONS = ("nodes", "N", "ntasks", "n", "ntasks-per-node")
STEP_FLAGS = ("v", "verbose", "l", "label", "Q", "quiet", "u", "unbuffered", "exact")
"""Launch-line flags without a value that change nothing measured (srun's verbosity, labels)."""
HARMLESS = re.compile(r"^(module\s+(load|purge|list|add)\b.*|echo\b.*|set\s+-[euxo]+(\s+pipefail)?|"
                      r'cd\s+"?\$\{?SLURM_SUBMIT_DIR\}?"?)$')
LAUNCHERS = ("srun", "mpirun", "mpiexec")
PYTHONS = ("python", "python3")
SHELL_META = re.compile(r"[$`;|&<>(){}*?~\\]")


class ScriptRefused(ValueError):
    """The batch script asks for something the course does not allow (the student's to fix)."""


@dataclass(frozen=True)
class BatchJob:
    """What a batch script runs: `tasks` ranks over `nodes` nodes of `python program args…`;
    `unused`: the options that only the course's own cluster would act on, as the script wrote
    them (for the report)."""

    nodes: int
    tasks: int
    program: str
    args: list[str]
    unused: tuple[str, ...] = ()

    def unused_note(self) -> str | None:
        """The report's line for the options not used here (None: there were none), naming at
        most NOTED of them."""
        if not self.unused:
            return None
        more = len(self.unused) - NOTED
        return ("not used here, the course's runner decides (partition, account, GPUs, cores "
                f"per task, memory, time, log files): {', '.join(self.unused[:NOTED])}"
                + (f" and {more} more" if more > 0 else ""))


NOTED = 12
"""Options not used here that the report names (a script of 10,000 `#SBATCH -o` lines put a
620 KB note in the report)."""


def _split(line: str, where: str, *, comments: bool = False) -> list[str]:
    """The line's words as the shell reads them; ScriptRefused naming the line when it cannot
    (an unclosed quote)."""
    try:
        return shlex.split(line, comments=comments)
    except ValueError as exc:
        raise ScriptRefused(f"{where}: cannot be read ({exc}: an unclosed quote?)") from exc


def _options(tokens: list[str], where: str, flags: tuple[str, ...] = ()
             ) -> dict[str, str]:
    """`--key=value`, `--key value`, `-k value` and `-kvalue` as a dict (long names kept);
    `flags` take no value (their value is "")."""
    out: dict[str, str] = {}
    i = 0
    while i < len(tokens):
        tok = tokens[i]
        if tok.startswith("--"):
            key, eq, value = tok[2:].partition("=")
            if not eq and key not in flags:
                i += 1
                if i == len(tokens):
                    raise ScriptRefused(f"{where}: --{key} needs a value")
                value = tokens[i]
        elif tok.startswith("-") and len(tok) > 1:
            key, value = tok[1], tok[2:]
            if not value and key not in flags:
                i += 1
                if i == len(tokens):
                    raise ScriptRefused(f"{where}: -{key} needs a value")
                value = tokens[i]
        else:
            raise ScriptRefused(f"{where}: '{tok}' is not an option")
        out[key] = value
        i += 1
    return out


def _shown(key: str, value: str) -> str:
    """An option as the report lists it, printable and short."""
    dash = "--" if len(key) > 1 else "-"
    text = "".join(ch for ch in f"{dash}{key}{'=' if value else ''}{value}" if ch.isprintable())
    return text if len(text) <= 60 else text[:57] + "..."


def _count(options: dict[str, str], names: tuple[str, ...], where: str) -> int | None:
    for name in names:
        if name in options:
            value = options[name]
            if not value.isdigit() or int(value) < 1:
                raise ScriptRefused(f"{where}: --{names[0]}={value} is not a positive number")
            return int(value)
    return None


def _shape(options: dict[str, str], where: str) -> tuple[int | None, int | None, int | None]:
    return (_count(options, ("nodes", "N"), where), _count(options, ("ntasks", "n"), where),
            _count(options, ("ntasks-per-node",), where))


def parse(text: str, resources: Resources, files: set[str]) -> BatchJob:
    """The job a batch script asks for, checked against the package's `resources` and the
    submission's `files`; ScriptRefused, naming the line, for anything not allowed."""
    directives: dict[str, str] = {}
    unused: list[str] = []
    launch: tuple[int, list[str]] | None = None
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        where = f"line {number}"
        if line.startswith("#SBATCH"):
            if launch is not None:
                raise ScriptRefused(f"{where}: #SBATCH after the first command is ignored by "
                                    "SLURM: move it up")
            opts = _options(_split(line[len("#SBATCH"):], where, comments=True), where)
            for key, value in opts.items():
                if key in PLACE_OPTIONS:
                    unused.append(_shown(key, value))
                elif key in SHAPE_OPTIONS:
                    directives[key] = value
                else:
                    raise ScriptRefused(f"{where}: #SBATCH --{key} is not allowed here: it would "
                                        "change what runs or what is measured")
            continue
        if not line or line.startswith("#") or HARMLESS.match(line):
            continue
        tokens = line.split()
        if tokens[0] not in LAUNCHERS:
            raise ScriptRefused(f"{where}: only one srun (or mpirun) line that starts your "
                                f"Python program may run; '{tokens[0]}' may not")
        if launch is not None:
            raise ScriptRefused(f"{where}: a second launch; the job runs one program")
        if SHELL_META.search(line):
            raise ScriptRefused(f"{where}: shell syntax ($, quotes' expansions, pipes, "
                                "redirections) is not run here: give the arguments literally")
        launch = (number, _split(line, where))
    if launch is None:
        raise ScriptRefused("the script starts no program: add a line such as "
                            "'srun python task.py'")
    number, argv = launch
    where = f"line {number}"
    start = next((i for i, tok in enumerate(argv) if tok in PYTHONS), None)
    if start is None:
        raise ScriptRefused(f"{where}: {argv[0]} must start 'python FILE.py'")
    step_opts: dict[str, str] = {}
    for key, value in _options(argv[1:start], where, STEP_FLAGS).items():
        if key in PLACE_OPTIONS or key in STEP_FLAGS:
            unused.append(f"{argv[0]} {_shown(key, value)}")
        elif key in SHAPE_OPTIONS:
            step_opts[key] = value
        else:
            raise ScriptRefused(f"{where}: {argv[0]} option '{key}' is not allowed here")
    program = [p for p in argv[start + 1:] if p != "-u"]  # unbuffered output: the default here
    if not program or program[0] not in files or not program[0].endswith(".py"):
        raise ScriptRefused(f"{where}: '{' '.join(program[:1]) or 'python'}' is not one of "
                            f"your Python files ({', '.join(sorted(files))})")
    nodes, tasks, per_node = _shape(directives, "#SBATCH")
    s_nodes, s_tasks, s_per = _shape(step_opts, where)
    nodes, tasks, per_node = s_nodes or nodes, s_tasks or tasks, s_per or per_node
    if tasks is None:
        tasks = (nodes or 1) * (per_node or 1)
    if nodes is None:  # as SLURM does: the nodes the tasks need
        nodes = -(-tasks // (per_node or resources.cores_per_node))
    if per_node is not None and per_node * nodes != tasks:
        raise ScriptRefused(f"--ntasks-per-node={per_node} on {nodes} node(s) is not "
                            f"--ntasks={tasks}")
    if tasks != resources.ranks:
        raise ScriptRefused(f"{tasks} task(s): this assignment times {resources.ranks} MPI "
                            f"ranks (--ntasks={resources.ranks})")
    if nodes > resources.nodes:
        raise ScriptRefused(f"--nodes={nodes}: this assignment runs on at most "
                            f"{resources.nodes} node(s)")
    if -(-tasks // nodes) > resources.cores_per_node:
        raise ScriptRefused(f"{tasks} tasks on {nodes} node(s) is more than the "
                            f"{resources.cores_per_node} cores of a node")
    return BatchJob(nodes=nodes, tasks=tasks, program=program[0], args=program[1:],
                    unused=tuple(unused))
