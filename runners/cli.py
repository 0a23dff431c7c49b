"""The `paragrade` command line."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from runners import package
from runners.grading import grader, render, skeleton, testrun, validate
from runners.measure.calibration import NodeBusy
from runners.nodes import hardware
from runners.protocol import Practice
from runners.protocol.backends import SANDBOX_BACKENDS
from runners.sandbox import BackendUnavailable
from runners.settings import get_settings

app = typer.Typer(help="paragrade: grade parallel programs with trustworthy speedups.",
                  no_args_is_help=True, add_completion=False)
assignments_app = typer.Typer(help="Assignment packages.", no_args_is_help=True)
app.add_typer(assignments_app, name="assignments")
console = Console()
err = Console(stderr=True)

Backend = Annotated[str | None, typer.Option(help=", ".join(SANDBOX_BACKENDS))]


def _fail(message: str, code: int = 2) -> None:
    err.print(f"[red]error:[/] {message}")
    raise typer.Exit(code)


def _load(ref: str) -> package.Assignment:
    try:
        return package.resolve(ref, get_settings().assignments_dir)
    except package.PackageError as exc:
        _fail("\n".join(str(p) for p in exc.problems))
        raise  # unreachable


@assignments_app.command("list")
def list_assignments() -> None:
    """List the assignment packages found under the assignments folder."""
    root = get_settings().assignments_dir
    table = Table(title=f"assignments in {root}")
    table.add_column("assignment", no_wrap=True)
    for col in ("version", "kind", "launcher", "cores", "ranks", "title"):
        table.add_column(col)
    found = package.discover(root)
    for item in found:
        if isinstance(item, package.PackageError):
            table.add_row(f"[red]{item.problems[0].file}[/]", "", "", "", "", "",
                          f"[red]{item}[/]")
            continue
        m = item.manifest
        table.add_row(item.ref, m.version, m.resources.kind, m.launcher.kind,
                      str(m.resources.cores), str(m.resources.ranks), m.title)
    console.print(table)
    if not found:
        err.print(f"no packages under {root}")


@assignments_app.command("new")
def new_cmd(folder: Annotated[Path, typer.Argument(
                help="the package's folder, to be created; its name is the slug, e.g. primes")],
            title: Annotated[str, typer.Option(help="the title students read")] = skeleton.TITLE,
            ) -> None:
    """Write a whole package (counting primes with a Pool) that validates as it stands."""
    try:
        written = skeleton.write(folder, title)
    except (skeleton.SkeletonError, OSError) as exc:
        _fail(str(exc))
    for path in written:
        console.print(f"  {path}", markup=False, highlight=False)
    console.print(f"[green]✔[/] wrote {folder} ({len(written)} files): edit it, then run "
                  f"paragrade assignments validate {folder}")


@assignments_app.command("validate")
def validate_cmd(folder: Path, backend: Backend = None,
                 as_json: Annotated[bool, typer.Option("--json", help="print the checks as JSON")]
                 = False,
                 measure: Annotated[bool, typer.Option(
                     help="grade the reference in full: its speedup here, against the curve")]
                 = False) -> None:
    """Check a package: manifest, reference passes, starter fails, baseline and timing hook work."""
    if not folder.exists():
        _fail(f"{folder}: no such folder")
    try:
        if as_json:
            checks = validate.validate(folder, backend=backend, measure=measure)
        else:
            with console.status("validating") as status:
                checks = validate.validate(folder, backend=backend, measure=measure,
                                           progress=lambda msg: status.update(msg))
    except BackendUnavailable as exc:
        _fail(str(exc))
    except NodeBusy as exc:
        _fail(f"not checked: {exc}")
    if as_json:
        sys.stdout.write(json.dumps([c.message().model_dump() for c in checks], indent=2) + "\n")
        raise typer.Exit(0 if all(c.ok for c in checks) else 1)
    bad = False
    for c in checks:
        if c.skipped:
            console.print(f"[yellow]–[/] {c.name}: skipped ({c.skipped})")
        elif c.ok:
            console.print(f"[green]✔[/] {c.name}")
        else:
            bad = True
            console.print(f"[red]✘[/] {c.name}")
            for p in c.problems:
                console.print(f"    {p}", markup=False, highlight=False)
    if bad:
        raise typer.Exit(1)


def _files(assignment: package.Assignment, files: list[Path]) -> dict[str, bytes]:
    """A submission's files by name; a single file is taken as the entry file."""
    for f in files:
        if not f.is_file():
            _fail(f"{f}: no such file")
    if len(files) == 1:
        return {assignment.manifest.entry.file: files[0].read_bytes()}
    return {f.name: f.read_bytes() for f in files}


@app.command()
def grade(
    assignment: Annotated[str, typer.Argument(help="course/slug, e.g. treasure-hunt/t1-multiprocessing")],
    files: Annotated[list[Path], typer.Argument(help="your solution file(s)")],
    as_json: Annotated[bool, typer.Option("--json", help="print the GradeReport as JSON")] = False,
    backend: Backend = None,
    seed: Annotated[int | None, typer.Option(help="reuse a grading's seed")] = None,
    timing: Annotated[bool, typer.Option(help="measure the speedup")] = True,
    reference_speedup: Annotated[float | None, typer.Option(
        min=0.001, help="the reference's speedup on this machine (as validation measures it): "
        "the figure is then anchored to the reference, timed beside the solution")] = None,
    timing_only: Annotated[bool, typer.Option(hidden=True, help="a final run's turn: no tests, "
                                              "the headline worker count only")] = False,
    timing_share: Annotated[float, typer.Option(hidden=True, min=0.01, max=1.0, help=(
        "the share of the timing budget a final run's turn takes"))] = 1.0,
    practice: Annotated[Practice | None, typer.Option(hidden=True, help=(
        "a practice run on a compute node: 'tests' (the public ones) or 'timed'"))] = None,
    profile: Annotated[bool, typer.Option(help=(
        "also profile one untimed call (after the timing): where the time went"))] = False,
) -> None:
    """Grade a solution: hidden tests in the sandbox, speedup, scaling, points."""
    a = _load(assignment)
    content = _files(a, files)
    try:
        if as_json:
            result = grader.grade(a, content, backend=backend, seed=seed, with_timing=timing,
                                  reference_speedup=reference_speedup, timing_only=timing_only,
                                  timing_share=timing_share, practice=practice,
                                  profile=profile)
        else:
            with console.status(f"grading {a.ref}") as status:
                result = grader.grade(a, content, backend=backend, seed=seed, with_timing=timing,
                                      reference_speedup=reference_speedup,
                                      timing_only=timing_only, timing_share=timing_share,
                                      practice=practice, profile=profile,
                                      progress=lambda msg: status.update(msg))
    except BackendUnavailable as exc:
        _fail(str(exc))
    if as_json:
        sys.stdout.write(json.dumps(result.model_dump(mode="json"), indent=2) + "\n")
    else:
        render.render(result, console)


@app.command("test")
def test_cmd(
    assignment: Annotated[str, typer.Argument(help="course/slug")],
    files: Annotated[list[Path], typer.Argument(help="your solution file(s)")],
    backend: Backend = None,
) -> None:
    """Run only the public tests against a solution (full messages, no timing)."""
    a = _load(assignment)
    settings = get_settings()
    content = _files(a, files)
    from runners.runs.stage import Stage

    stage = Stage(scratch=settings.scratch_dir)
    try:
        executor_name = backend or settings.backend
        from runners.sandbox import create_executor

        executor = create_executor(settings, executor_name)
        cpus, _ = hardware.allotment(a)
        gpu_mode = hardware.decide_gpu_mode(a, settings)
        if gpu_mode == "unavailable":
            _fail("this assignment needs a GPU runner")
        tests, output = testrun.run_tests(
            a, stage.add_code("submission", content), backend=executor.name, seed=0,
            gpu_mode=gpu_mode, cpus=cpus, reveal=True, public_only=True)
    except BackendUnavailable as exc:
        _fail(str(exc))
    finally:
        stage.cleanup()
    for t in tests:
        console.print(f"{render.MARK[t.outcome]} {t.name}: {t.message}", highlight=False)
    if output.strip():
        console.rule("your program's output")
        console.print(output, markup=False, highlight=False)
    if any(t.outcome.value in ("failed", "error") for t in tests):
        raise typer.Exit(1)


runner_app = typer.Typer(help="Serve grading jobs (no subcommand), or calibrate this node.")
app.add_typer(runner_app, name="runner")


@runner_app.callback(invoke_without_command=True)
def runner(
    ctx: typer.Context,
    queues: Annotated[str, typer.Option(help="queues this node serves: cpu,mpi,gpu")] = "cpu,mpi",
    server: Annotated[str | None, typer.Option(help="server URL (PARAGRADE_RUNNER_SERVER)")] = None,
    broker: Annotated[str | None, typer.Option(
        help="Celery broker URL (PARAGRADE_BROKER_URL), e.g. redis://HOST:6379/0")] = None,
    backend: Backend = None,
    name: Annotated[str | None, typer.Option(help="how the fleet lists this runner")] = None,
    cpus: Annotated[str | None, typer.Option(
        help="cores to grade on, e.g. 0-7: one slice per runner when several share a node")] = None,
    stand_in_nodes: Annotated[bool, typer.Option(
        "--stand-in-nodes", help="also serve mpinodes on two stand-in nodes of this host where "
        "it allows them (root), else say why not (the one-command start's runner)")] = False,
    idle_exit: Annotated[float | None, typer.Option(
        min=1, help="leave after this many seconds without a job (a pilot started for the "
        "queue)")] = None,
    drain_s: Annotated[float | None, typer.Option(
        "--drain-s", min=1, help="SIGUSR1 means the allocation ends in this many seconds: take "
        "no new job, hand back one that cannot finish by then (SLURM's --signal=B:USR1@N)")]
        = None,
) -> None:
    """Serve grading jobs from a paragrade server's queues (token from PARAGRADE_RUNNER_TOKEN)."""
    if ctx.invoked_subcommand is not None:
        return
    import logging
    import os

    from runners.fleet import runner
    from runners.nodes import hardware, overlay
    from runners.protocol import QUEUES
    from runners.sandbox import BackendUnavailable

    wanted = [q.strip() for q in queues.split(",") if q.strip()]
    nodes_said = None
    if stand_in_nodes and "mpinodes" not in wanted:
        if (why := overlay.standin_problem(hardware.host_cpus())) is None:
            # In the environment: every part of the runner reads the nodes it holds from there.
            os.environ.setdefault("PARAGRADE_STANDIN_NODES", "2")
            get_settings.cache_clear()
            wanted.append("mpinodes")
            nodes_said = ("two stand-in nodes on this host: two-node MPI tasks (the mpinodes "
                          "queue) are graded here")
        else:
            nodes_said = f"two-node MPI tasks wait for a runner that holds nodes: {why}"
    settings = get_settings()
    if backend is not None:
        settings = settings.model_copy(update={"backend": backend})
    if cpus is not None:
        settings = settings.model_copy(update={"cpus": cpus})
    url, broker_url = server or settings.runner_server, broker or settings.broker_url
    if not url or not settings.runner_token or not broker_url:
        _fail("set --server and --broker (or PARAGRADE_RUNNER_SERVER, PARAGRADE_BROKER_URL) "
              "and PARAGRADE_RUNNER_TOKEN")
        return
    unknown = sorted(set(wanted) - set(QUEUES))
    if unknown or not wanted:
        _fail(f"unknown queue(s) {', '.join(unknown) or '(none given)'}: use {', '.join(QUEUES)}")
        return
    logging.basicConfig(level=logging.INFO, format="%(asctime)s runner %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)
    if nodes_said:
        logging.info(nodes_said)
    try:
        runner.serve(server=url, token=settings.runner_token, broker_url=broker_url,
                     queues=wanted, name=name, settings=settings,  # type: ignore[arg-type]
                     idle_exit_s=idle_exit, drain_s=drain_s)
    except (BackendUnavailable, runner.NoGpu, runner.NoGang, runner.BadCpus, runner.Refused,
            overlay.OverlayError) as exc:
        _fail(str(exc))


@runner_app.command("calibrate")
def calibrate_cmd(
    cpus: Annotated[str | None, typer.Option(
        help="the cores to calibrate, e.g. 0-7 (default: every core this process may use)")] = None,
    seconds: Annotated[float, typer.Option(min=0.5, max=60, help="how long to spin")] = 3.0,
) -> None:
    """Measure this node's idle cores and store them with the runner's state: every grading's
    capacity probe is compared with them (refused, saying why, where the node is busy now)."""
    from runners.fleet.runner import BadCpus, parse_cpus
    from runners.measure import calibration, capacity

    settings = get_settings()
    try:
        chosen = sorted(parse_cpus(cpus)) if cpus else hardware.host_cpus()
    except BadCpus as exc:
        _fail(str(exc))
        return
    if missing := sorted(set(chosen) - set(hardware.host_cpus())):
        _fail(f"core(s) {', '.join(map(str, missing))} are not this process's to use "
              f"(it may use {', '.join(map(str, hardware.host_cpus()))})")
        return
    try:
        cal = capacity.calibrate(chosen, seconds=seconds)
    except calibration.NodeBusy as exc:
        _fail(f"not calibrated: the node is busy ({exc}); run it again when the node is idle "
              f"(the calibration at {settings.calibration_file} is kept as it was)")
        return
    cal = calibration.store(cal, settings.calibration_file)
    console.print(f"{calibration.summary(cal)}; stored in {settings.calibration_file}")


@app.command("node-sandbox", hidden=True)
def node_sandbox(backend: Annotated[str, typer.Option(help="this node's sandbox backend")] = "bwrap"
                 ) -> None:
    """One node's sandbox of a multi-node run, driven by the leader over stdin/stdout."""
    from runners.nodes import nodeagent

    raise typer.Exit(nodeagent.serve(backend, sys.stdin, sys.stdout))


@app.command("node-network")
def node_network(action: Annotated[str, typer.Argument(help="up (SLURM prolog) or down (epilog)")]
                 ) -> None:
    """A SLURM prolog's or epilog's work for a multi-node job on this node: its network
    namespace and its end of the job's overlay (containers/slurm/). Reads SLURM_JOB_ID,
    SLURM_JOB_NODELIST (a prolog's SLURM_NODELIST) and SLURMD_NODENAME; other users' jobs and
    jobs on one node get nothing."""
    import os

    from runners.nodes import gang, overlay

    settings = get_settings()
    job, me = settings.slurm_job_id, settings.slurmd_nodename
    nodelist = settings.slurm_job_nodelist or settings.slurm_nodelist
    if not (job and nodelist and me) or action not in ("up", "down"):
        _fail("node-network up|down runs as a SLURM prolog/epilog (SLURM_JOB_ID, "
              "SLURM_JOB_NODELIST and SLURMD_NODENAME unset)")
        return
    try:
        if action == "down":
            overlay.job_down(job, me)
            return
        names = gang.slurm_hostnames(nodelist)
        if len(names) < 2 or not gang.slurm_job_is_ours(job):
            return
        nodes = gang.slurm_nodes(settings.model_copy(update={"slurmd_nodename": None}), job,
                                 names, sorted(os.sched_getaffinity(0)))
        overlay.job_up(job, nodes, me)
    except overlay.OverlayError as exc:
        _fail(str(exc), code=1)


@app.command()
def demo(backend: Backend = None) -> None:
    """Grade the shipped t1 reference and a wrong solution, to see the engine at work."""
    a = _load("treasure-hunt/t1-multiprocessing")
    for label, code in (("reference solution", package.code_of(a, "reference")),
                        ("starter (unfinished)", package.code_of(a, "starter"))):
        console.rule(f"grading the {label} of {a.ref}")
        with console.status("grading") as status:
            result = grader.grade(a, code, backend=backend,
                                  progress=lambda msg: status.update(msg))
        render.render(result, console)


if __name__ == "__main__":
    app()
