"""A similarity run's messages: which submissions to compare, the pairs found, the text compared."""

from __future__ import annotations

from pydantic import Field

from runners.protocol.base import PROTOCOL_VERSION, Frozen
from runners.protocol.queues import Queue


class SimilarityJob(Frozen):
    """Compare the chosen submissions of one assignment with each other (a similarity run).

    The runner fetches the package (its starter, baseline and reference are boilerplate, never
    evidence of copying) and one zip of the submissions, each under a folder named by its id."""

    protocol_version: int = PROTOCOL_VERSION
    run_id: int
    assignment: str = Field(description="course/slug")
    bundle_sha256: str
    submission_ids: list[int]
    threshold: float = Field(gt=0, le=1, description="Share of a submission's code found in the "
                                                     "other that makes a pair worth reporting")
    queue: Queue



class SimilarPair(Frozen):
    """Two submissions sharing code: each one's share found in the other, and where (1-based,
    inclusive line ranges of each one's `submission_text`)."""

    a: int = Field(description="Submission id")
    b: int = Field(description="Submission id")
    share_a: float = Field(ge=0, le=1, description="Share of a's code found in b")
    share_b: float = Field(ge=0, le=1, description="Share of b's code found in a")
    lines_a: list[tuple[int, int]] = Field(max_length=10_000)
    lines_b: list[tuple[int, int]] = Field(max_length=10_000)


class SimilarityResult(Frozen):
    pairs: list[SimilarPair] = Field(max_length=100_000,
                                     description="Pairs at or above the threshold, most similar "
                                                 "first")
    compared: int = Field(ge=0, description="Pairs compared")
    seconds: float = Field(ge=0)
    tool: str = Field(max_length=100, description="The comparing tool and its version")


def submission_text(files: dict[str, bytes], suffix: str = ".py") -> str:
    """What a similarity run compares of one submission: its source files in name order, each
    after a header line (line numbers in a SimilarPair count in this text)."""
    parts = [f"# ==== {name} ====\n" + content.decode("utf-8", "replace").rstrip("\n") + "\n"
             for name, content in sorted(files.items()) if name.endswith(suffix)]
    return "".join(parts)
