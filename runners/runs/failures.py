"""How a run of the submission ended badly, and whose fault that was (its verdict).

Raised on the trusted side from what it observed of a run (the sandbox's exit, the harness's
reply); the grader and the test plugin turn each into a verdict.
"""

from __future__ import annotations

from runners.protocol import Verdict
from runners.sandbox import ExitInfo


class SubmissionFailure(Exception):
    """The submission (not the grader) made a run end badly; `verdict` says how."""

    def __init__(self, verdict: Verdict, message: str, output: str = "") -> None:
        super().__init__(message)
        self.verdict = verdict
        self.message = message
        self.output = output


class SubmissionRaised(Exception):
    """The submission's function raised; the run itself is fine."""

    def __init__(self, type_name: str, message: str, tb: str) -> None:
        super().__init__(f"{type_name}: {message}")
        self.type_name = type_name
        self.message = message
        self.traceback = tb


class ResultTooLarge(SubmissionFailure):
    """The arrays a call returned add up to more than the run may hand back."""

    def __init__(self, cap: int) -> None:
        super().__init__(Verdict.OUTPUT_EXCEEDED,
                         f"the returned arrays exceed {cap >> 20} MiB (the run's memory limit)")


class ProtocolViolation(SubmissionFailure):
    """Something other than the harness wrote to the result channel."""

    def __init__(self, message: str) -> None:
        super().__init__(Verdict.FORBIDDEN, f"result channel tampered with: {message}")


def failure_from_exit(info: ExitInfo, wall_s: float) -> SubmissionFailure:
    """Name what ended a run, from what the trusted side observed."""
    out = info.output_excerpt
    if info.node_lost:
        return SubmissionFailure(Verdict.PLATFORM_ERROR, f"node {info.node_lost} of the run was "
                                 "lost (the platform's fault: graded again, not counted)", out)
    if info.timed_out:
        return SubmissionFailure(Verdict.TIMEOUT, f"time limit exceeded ({wall_s:g} s wall)", out)
    if info.output_exceeded:
        return SubmissionFailure(Verdict.OUTPUT_EXCEEDED,
                                 f"output limit exceeded ({info.output_bytes} bytes written)", out)
    if info.disk_exceeded:
        return SubmissionFailure(Verdict.OUTPUT_EXCEEDED, "disk limit exceeded in the work dir", out)
    if info.oom_killed or "MemoryError" in out[-4000:]:
        return SubmissionFailure(Verdict.MEMORY_EXCEEDED, "memory limit exceeded", out)
    if info.ranks_ended_on:
        return SubmissionFailure(Verdict.CRASHED, f"the MPI ranks on node {info.ranks_ended_on} "
                                 "ended before answering (a rank crashed or exited while the "
                                 "others still worked): the run was stopped", out)
    rc = info.returncode
    how = f"killed by signal {-rc}" if rc is not None and rc < 0 else f"exited with status {rc}"
    if rc in (137, -9) and info.oom_killed is False:
        how += " (killed)"
    return SubmissionFailure(Verdict.CRASHED, f"the program {how} before answering", out)
