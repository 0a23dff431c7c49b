"""Rendering a GradeReport for a terminal (rich)."""

from __future__ import annotations

from rich.console import Console, Group
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from runners.protocol import GradeReport, Profile, TestOutcome, TestResult, Verdict

STYLE = {Verdict.PASSED: "bold green", Verdict.FAILED: "bold red",
         Verdict.PLATFORM_ERROR: "bold yellow", Verdict.AUTHOR_ERROR: "bold yellow"}
MARK = {TestOutcome.PASSED: "[green]✔[/]", TestOutcome.FAILED: "[red]✘[/]",
        TestOutcome.ERROR: "[red]![/]", TestOutcome.SKIPPED: "[dim]–[/]"}


CREDIT_LABEL = {"credited": "credited", "capped": "partly credited",
                "held": "held for review", "refused": "no performance points",
                "pending": "performance points pending"}
CREDIT_STYLE = {"credited": "green", "capped": "yellow", "held": "yellow", "refused": "red",
                "pending": "yellow"}


def serial_fraction_text(karp_flatt: float | None, efficiency: float, workers: int) -> str:
    """A serial fraction as shown: 'superlinear' where it would be negative, never a negative
    number."""
    if workers > 1 and efficiency > 1:
        return "superlinear"
    return "–" if karp_flatt is None else f"{karp_flatt:.3f}"


def render(report: GradeReport, console: Console) -> None:
    """Print the report: verdict, tests, speedup, scaling table, environment."""
    pending = report.credit is not None and report.credit.status == "pending"
    head = Text.assemble(
        (f"{report.verdict.value.upper()}", STYLE.get(report.verdict, "bold red")),
        f"  {report.assignment} v{report.assignment_version}   ",
        *((("practice: not graded, no points", "bold"), "\n") if report.practice else (
            (f"{report.score:g} / {report.max_score:g} points", "bold"),
            f"  (tests {report.test_points:g}, performance "
            f"{'pending' if pending else f'{report.performance_points:g}'})\n")),
        report.summary,
    )
    parts: list[object] = [head]
    if report.tests:
        tests = Table(box=None, show_header=True, header_style="bold", pad_edge=False)
        tests.add_column("")
        tests.add_column("test")
        tests.add_column("kind")
        tests.add_column("message", overflow="fold")
        for mark, names, kind, message in _rows(report.tests):
            tests.add_row(mark, names, kind, message)
        parts.append(tests)
    if report.speedup:
        s = report.speedup
        parts.append(Text(
            f"Speedup {s.median:.2f}×  (95 % CI {s.ci_low:.2f}–{s.ci_high:.2f}; baseline "
            f"{s.baseline_median_s * 1000:.1f} ms, yours {s.submission_median_s * 1000:.1f} ms, "
            f"{s.repetitions} runs each; the interval covers this grading's timed calls, not "
            "how a shared node drifts between gradings)"))
    if report.credit:
        c = report.credit
        what = f"{c.policy}; practice: what a graded run would earn, no points here" \
            if report.practice else c.policy
        parts.append(Text(f"Credit ({what}): {CREDIT_LABEL[c.status]}: {c.reason}",
                          style=CREDIT_STYLE[c.status]))
    if report.scaling:
        sc = Table(title="strong scaling", box=None, header_style="bold")
        for col in ("workers", "speedup", "95 % CI", "efficiency", "Karp–Flatt e", "busy cores",
                    "work ratio"):
            sc.add_column(col, justify="right")
        for p in report.scaling:
            cpu = p.cpu
            sc.add_row(str(p.workers), f"{p.speedup:.2f}", f"{p.ci_low:.2f}–{p.ci_high:.2f}",
                       f"{p.efficiency:.0%}", serial_fraction_text(p.karp_flatt, p.efficiency,
                                                                   p.workers),
                       "not measured" if cpu is None else
                       f"{cpu.parallelism:.2f} ({cpu.parallelism_ci_low:.2f}–"
                       f"{cpu.parallelism_ci_high:.2f})",
                       "–" if cpu is None else
                       f"{cpu.work_ratio:.3g} ({cpu.work_ratio_ci_low:.3g}–"
                       f"{cpu.work_ratio_ci_high:.3g})")
        parts.append(sc)
        if report.amdahl_serial_fraction is not None:
            parts.append(Text(f"Amdahl fit: serial fraction {report.amdahl_serial_fraction:.3f}"))
    if report.weak_scaling:
        wk = Table(title="weak scaling (problem size ∝ workers)", box=None, header_style="bold")
        for col in ("workers", "efficiency", "95 % CI", "1 worker", "these workers"):
            wk.add_column(col, justify="right")
        for w in report.weak_scaling:
            wk.add_row(str(w.workers), f"{w.efficiency:.0%}", f"{w.ci_low:.0%}–{w.ci_high:.0%}",
                       f"{w.one_worker_median_s * 1000:.1f} ms",
                       f"{w.submission_median_s * 1000:.1f} ms")
        parts.append(wk)
    if report.profile is not None:
        parts.extend(_profile(report.profile))
    for note in report.notes:
        parts.append(Text(f"note: {note}", style="yellow"))
    env = report.environment
    parts.append(Text(
        f"{env.backend}{'' if env.sandboxed else ' (UNSAFE)'} on {env.hostname}: {env.cpu_model}, "
        f"cores {env.core_set}{' (cpuset)' if env.core_set_enforced else ' (affinity)'}, "
        + ", ".join(f"{k} {v}" for k, v in sorted(env.versions.items()))
        + f"; seed {report.seed}; {report.wall_time_s:.1f} s", style="dim"))
    console.print(Panel(Group(*parts), title="paragrade", expand=False))  # type: ignore[arg-type]


BAR = {"run": "█", "mpi": "M", "wait": "·"}
BAR_WIDTH = 24


def _bar(timeline: list[tuple[float, float, str]], span: float) -> str:
    """A process's timeline as text: each character a 1/BAR_WIDTH of the call, its state the one
    that held most of that stretch."""
    out = []
    for i in range(BAR_WIDTH):
        lo, hi = span * i / BAR_WIDTH, span * (i + 1) / BAR_WIDTH
        held: dict[str, float] = {}
        for start, end, state in timeline:
            overlap = min(end, hi) - max(start, lo)
            if overlap > 0:
                held[state] = held.get(state, 0.0) + overlap
        out.append(BAR[max(held, key=held.__getitem__)] if held else " ")
    return "".join(out)


def _profile(p: Profile) -> list[object]:
    """Where the time of the profiled call went, as text (the page draws it)."""
    parts: list[object] = [Text(f"Where the time went: one untimed call, {p.seconds:.2f} s "
                                f"(█ running, M in MPI, · waiting)", style="bold")]
    if p.note:
        parts.append(Text(p.note, style="yellow"))
    span = max([p.seconds, *(seg[1] for w in p.processes for seg in w.timeline)])
    table = Table(box=None, header_style="bold", pad_edge=False)
    for col in ("process", "started", "run", "wait", "MPI", "timeline"):
        table.add_column(col, justify="left" if col in ("process", "started", "timeline")
                         else "right", no_wrap=True)
    for w in p.processes:
        table.add_row(w.label, "in call" if w.started_in_call else "before",
                      f"{w.running:.0%}", f"{w.waiting:.0%}", f"{w.in_mpi:.0%}",
                      _bar(w.timeline, span))
    if p.processes:
        parts.append(table)
    if p.balance is not None:
        parts.append(Text(f"load balance: the busiest worker ran {p.balance:.2f}× the mean"))
    top = Table(box=None, header_style="bold", pad_edge=False)
    top.add_column("where the running samples were")
    top.add_column("share", justify="right")
    for f in p.top:
        where = f"{f.file.rsplit('/', 1)[-1]}:{f.line}"
        top.add_row(f"{f.name} ({'your ' if f.own else ''}{where})", f"{f.share:.0%}")
    if p.top:
        parts.append(top)
    if p.gpu is not None:
        g = p.gpu
        kernels = ", ".join(f"{k.name} {k.share:.0%}" for k in g.per_kernel)
        parts.append(Text(f"GPU: kernels {g.kernels:.0%}{f' ({kernels})' if kernels else ''}, "
                          f"copies {g.copies:.0%}, host {g.host:.0%}"))
        parts.append(Text(g.note, style="yellow" if g.simulated else ""))
    if p.flame:
        parts.append(Text("most sampled stacks (the page draws them as a flame graph):",
                          style="bold"))
        total = sum(s.samples for s in p.flame) or 1
        for stack in p.flame[:3]:
            parts.append(Text(f"  {stack.samples / total:.0%}  " + " › ".join(stack.frames[-4:])))
    if p.cost_s is not None:
        parts.append(Text(f"the profile took {p.cost_s:.1f} s of the runner's time", style="dim"))
    return parts


NOT_RUN = "not run: "


def _rows(tests: list[TestResult]) -> list[tuple[str, str, str, str]]:
    """The tests' table rows; consecutive tests not run for the same reason (one before them
    ran into its time limit) are one row naming them all."""
    groups: list[tuple[TestResult, list[str], str | None]] = []
    for t in tests:
        at = t.message.find(NOT_RUN)
        reason = t.message[at:] if at >= 0 and t.outcome is TestOutcome.SKIPPED else None
        name = t.name.split("::")[-1]
        if reason is not None and groups and groups[-1][2] == reason:
            groups[-1][1].append(name)
        else:
            groups.append((t, [name], reason))
    return [(MARK[t.outcome], names[0] if len(names) == 1 else
             f"{len(names)} tests not run: {', '.join(names)}", "hidden" if t.hidden else "public",
             t.message if len(names) == 1 else str(reason)) for t, names, reason in groups]
