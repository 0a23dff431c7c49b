"""Verdicts, a closed set that says whose fault an outcome is, and one test's outcome."""

from __future__ import annotations

from enum import StrEnum
from typing import Literal


class Verdict(StrEnum):
    """Closed set of grading outcomes; `fault` says whose fault each one is."""

    PASSED = "passed"
    FAILED = "failed"
    TIMEOUT = "timeout"
    MEMORY_EXCEEDED = "memory_exceeded"
    CRASHED = "crashed"
    OUTPUT_EXCEEDED = "output_exceeded"
    FORBIDDEN = "forbidden"
    AUTHOR_ERROR = "author_error"
    PLATFORM_ERROR = "platform_error"

    @property
    def fault(self) -> Literal["student", "author", "platform"]:
        """Who is responsible for this verdict."""
        if self is Verdict.AUTHOR_ERROR:
            return "author"
        if self is Verdict.PLATFORM_ERROR:
            return "platform"
        return "student"


# When several tests end differently, the report's verdict is the most severe student verdict.
VERDICT_SEVERITY: tuple[Verdict, ...] = (
    Verdict.PLATFORM_ERROR,
    Verdict.AUTHOR_ERROR,
    Verdict.FORBIDDEN,
    Verdict.MEMORY_EXCEEDED,
    Verdict.OUTPUT_EXCEEDED,
    Verdict.TIMEOUT,
    Verdict.CRASHED,
    Verdict.FAILED,
    Verdict.PASSED,
)


class TestOutcome(StrEnum):
    """Outcome of one test."""

    __test__ = False  # not a pytest class

    PASSED = "passed"
    FAILED = "failed"
    ERROR = "error"
    SKIPPED = "skipped"
