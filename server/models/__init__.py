"""Tables (SQLAlchemy 2.0, typed), one module per concept; every table is importable from here,
and importing this package registers them all (Alembic's env.py relies on it). Schemas for the
API live in server/schemas.py."""

from server.clock import aware, now
from server.models.accounts import ApiToken, AuditLog, LoginFailure, User
from server.models.assignments import (
    Artifact,
    Assignment,
    AssignmentVersion,
    Extension,
    ReferenceFigure,
)
from server.models.courses import Course, Enrollment, LateDayGrant, RosterEntry
from server.models.finals import FinalGrade, FinalRun, FinalTurn
from server.models.fleet import Job, QueueScale, Runner, RunnerCredential
from server.models.lti import LtiGradePost, LtiIdentity, LtiLaunchData, LtiPlatform
from server.models.manual import (
    AppliedItem,
    ManualComment,
    ManualGrade,
    RegradeRequest,
    RubricItem,
)
from server.models.notices import (
    Announcement,
    MailMessage,
    NoticeChoice,
    NoticeSettings,
    Notification,
)
from server.models.practice import PracticeRun
from server.models.submissions import (
    BoardEntry,
    GradeReportRow,
    ScalingPointRow,
    SimilarityRun,
    Submission,
    TestResultRow,
)
from server.models.teams import Team, TeamMember

__all__ = [
    "Announcement", "ApiToken", "AppliedItem", "Artifact", "Assignment", "AssignmentVersion", "AuditLog",
    "BoardEntry", "Course", "Enrollment", "Extension", "FinalGrade", "FinalRun", "FinalTurn",
    "GradeReportRow", "Job", "LateDayGrant", "LoginFailure", "LtiGradePost", "LtiIdentity", "LtiLaunchData",
    "LtiPlatform", "MailMessage", "ManualComment", "ManualGrade", "NoticeChoice",
    "NoticeSettings", "Notification", "PracticeRun", "QueueScale", "ReferenceFigure",
    "RegradeRequest", "RosterEntry", "RubricItem", "Runner", "RunnerCredential", "ScalingPointRow",
    "SimilarityRun", "Submission", "Team", "TeamMember", "TestResultRow", "User", "aware", "now",
]
