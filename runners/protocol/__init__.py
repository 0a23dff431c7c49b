"""The contract between processes: grading jobs, grade reports, verdicts and the assignment
manifest.

This is the only runners package the server imports. Every model is frozen and versioned; a
change to a field's meaning bumps PROTOCOL_VERSION. Each module holds one part of the contract
(base, names, backends, text, queues, verdicts, report, jobs, similarity, manifest,
points); every public name is importable from here, `from runners.protocol import X`.
"""

from runners.protocol.base import (
    PROTOCOL_VERSION,
    Frozen,
)
from runners.protocol.jobs import (
    BUSY_PRESSURE,
    MAX_ROW_ID,
    GradeJob,
    JobHandBack,
    JobOffer,
    JobOutcome,
    RunnerHello,
    ValidateJob,
    ValidationCheck,
)
from runners.protocol.manifest import (
    MANIFEST,
    Array,
    Entry,
    Feedback,
    Files,
    Launcher,
    Manifest,
    Resources,
    Scoring,
    Service,
    Shown,
    Timing,
    curve_share,
    performance_share,
)
from runners.protocol.names import (
    SLUG_RE,
    check_relpath,
)
from runners.protocol.queues import (
    LOWEST_PRIORITY,
    QUEUES,
    TASK_NAME,
    Queue,
    broker_options,
)
from runners.protocol.report import (
    CORES_TOLERANCE,
    Anchor,
    Credit,
    CreditStatus,
    DeviceWork,
    Environment,
    GradeReport,
    Interference,
    MpiGpuPath,
    Parallelism,
    ScalingPoint,
    SpeedupFigure,
    TestResult,
    WeakScalingPoint,
    credited_speedup,
    timed_on_a_busy_node,
)
from runners.protocol.similarity import (
    SimilarityJob,
    SimilarityResult,
    SimilarPair,
    submission_text,
)
from runners.protocol.verdicts import (
    VERDICT_SEVERITY,
    TestOutcome,
    Verdict,
)

__all__ = [
    "BUSY_PRESSURE",
    "CORES_TOLERANCE",
    "LOWEST_PRIORITY",
    "MANIFEST",
    "MAX_ROW_ID",
    "PROTOCOL_VERSION",
    "QUEUES",
    "SLUG_RE",
    "TASK_NAME",
    "VERDICT_SEVERITY",
    "Anchor",
    "Array",
    "Credit",
    "CreditStatus",
    "DeviceWork",
    "Entry",
    "Environment",
    "Feedback",
    "Files",
    "Frozen",
    "GradeJob",
    "GradeReport",
    "Interference",
    "JobHandBack",
    "JobOffer",
    "JobOutcome",
    "Launcher",
    "Manifest",
    "MpiGpuPath",
    "Parallelism",
    "Queue",
    "Resources",
    "RunnerHello",
    "ScalingPoint",
    "Scoring",
    "Service",
    "Shown",
    "SimilarPair",
    "SimilarityJob",
    "SimilarityResult",
    "SpeedupFigure",
    "TestOutcome",
    "TestResult",
    "Timing",
    "ValidateJob",
    "ValidationCheck",
    "Verdict",
    "WeakScalingPoint",
    "broker_options",
    "check_relpath",
    "credited_speedup",
    "curve_share",
    "performance_share",
    "submission_text",
    "timed_on_a_busy_node",
]
