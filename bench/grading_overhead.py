"""Where a grading's time goes: total wall time, the timed runs inside it, and each phase
(environment.phases: set-up, tests, timing and its timed calls, start-up runs, report).

Usage: .venv/bin/python -m bench.grading_overhead [N] [COURSE/SLUG ...] [--compare] [--detail]
  (default: 3 gradings of treasure-hunt/t1-multiprocessing's reference). --compare grades each
  package both ways, alternating: tests in a fresh sandbox each (PARAGRADE_FORK_TESTS=0, the way
  before the zygote) and forked from one sandbox's zygote (the default). --detail also splits
  timing's untimed part: sandbox starts (with the code's imports) and closes, warm-up calls (and
  the calls of windows re-timed because the node was short of cores: runners/measure/capacity.py), the
  exchange around calls (arguments staged, answers decoded), the hook drawing inputs and checking
  answers (each side's time measured by wrapping those functions in this process).
"""

from __future__ import annotations

import collections
import contextlib
import functools
import os
import sys
import time
from collections.abc import Callable, Iterator
from types import ModuleType
from typing import Any

from bench.common import publish
from runners import package
from runners.grading import grader, measuring, testrun
from runners.runs.session import Session
from runners.settings import get_settings

spent: dict[str, float] = collections.defaultdict(float)  # --detail: seconds per wrapped part


def _timed(key: str, fn: Callable[..., Any], *, call: bool = False) -> Callable[..., Any]:
    """`fn`, adding its wall seconds to spent[key] (a Session.call's own timed seconds to
    spent["call elapsed"] too)."""
    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        t = time.monotonic()
        try:
            out = fn(*args, **kwargs)
        finally:
            spent[key] += time.monotonic() - t
        if call:
            spent["call elapsed"] += out[1]
        return out
    return wrapper


@contextlib.contextmanager
def detailed() -> Iterator[None]:
    """Wrap the sandbox session's life cycle and every hook the grader loads."""
    saved = Session.__enter__, Session.close, Session.call, measuring.load_hook

    def load_hook(assignment: package.Assignment) -> ModuleType:
        hook = saved[3](assignment)
        wrapped = ModuleType(hook.__name__)
        wrapped.__dict__.update(hook.__dict__)
        for name, key in (("make_input", "draws"), ("make_warmup_input", "draws"),
                          ("check", "checks")):
            if callable(getattr(hook, name, None)):
                setattr(wrapped, name, _timed(key, getattr(hook, name)))
        return wrapped

    Session.__enter__ = _timed("starts", Session.__enter__)  # type: ignore[method-assign]
    Session.close = _timed("closes", Session.close)  # type: ignore[method-assign]
    Session.call = _timed("calls", Session.call, call=True)  # type: ignore[method-assign]
    measuring.load_hook = load_hook
    try:
        yield
    finally:
        Session.__enter__, Session.close, Session.call, measuring.load_hook = saved  # type: ignore[method-assign]


def main() -> None:
    args = sys.argv[1:]
    compare, detail = "--compare" in args, "--detail" in args
    args = [a for a in args if a not in ("--compare", "--detail")]
    n = int(args.pop(0)) if args and args[0].isdigit() else 3
    refs = args or ["treasure-hunt/t1-multiprocessing"]
    modes = ["fresh", "forked"] if compare else ["forked"]
    rows = []
    testrun.prepare()  # as a runner's pool process does when it starts
    for ref in refs:
        a = package.resolve(ref, get_settings().assignments_dir)
        for _ in range(n):
            for mode in modes:
                # read by the test process the grader starts (runners.grading.pytest_plugin)
                os.environ["PARAGRADE_FORK_TESTS"] = "1" if mode == "forked" else "0"
                spent.clear()
                with detailed() if detail else contextlib.nullcontext():
                    r = grader.grade(a, package.code_of(a, "reference"))
                ph = r.environment.phases
                extra = {} if not detail else {  # Session calls: function entries only
                    "starts_s": spent["starts"], "closes_s": spent["closes"],
                    "warmups_s": max(0.0, spent["call elapsed"] - r.timed_time_s),
                    "exchange_s": spent["calls"] - spent["call elapsed"],
                    "draws_s": spent["draws"], "checks_s": spent["checks"]}
                rows.append({"package": ref.split("/")[1], "tests_in": mode,
                             "wall_s": r.wall_time_s, "timed_s": r.timed_time_s,
                             "overhead_s": r.wall_time_s - r.timed_time_s,
                             "setup_s": ph.get("set-up", 0.0), "tests_s": ph.get("tests", 0.0),
                             "untimed_s": ph.get("timing", 0.0) - r.timed_time_s,
                             "startup_s": ph.get("start-up runs", 0.0),
                             "report_s": ph.get("report", 0.0),
                             "runs_per_side": r.speedup.repetitions if r.speedup else 0,
                             **extra})
                print(f"{ref} ({mode}): {r.summary}; {ph}", flush=True)
    details = {"starts_s": "sandbox starts %.2f", "closes_s": "closes %.2f",
               "warmups_s": "warm-up and re-timed calls %.2f", "exchange_s": "exchange %.2f",
               "draws_s": "drawing inputs %.2f", "checks_s": "checking answers %.2f"}
    publish("grading_overhead", rows, {
        "package": "package", "tests_in": "tests", "wall_s": "wall (s) %.1f",
        "timed_s": "timed runs (s) %.1f", "overhead_s": "overhead (s) %.1f",
        "setup_s": "set-up %.2f", "tests_s": "tests %.2f",
        "untimed_s": "timing, untimed part %.2f", "startup_s": "start-up runs %.2f",
        "report_s": "report %.2f", "runs_per_side": "timed runs per side",
        **(details if detail else {})})


if __name__ == "__main__":
    main()
