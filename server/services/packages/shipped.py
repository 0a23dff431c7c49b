"""The shipped courses: each course folder under the assignments folder (one with a
`course.toml`), created for the first instructor, its packages imported.

The order of import is the order of validation: each import queues its package's validation and
commits at once (the job is published then), and a runner takes a queue's validations in the
order they were published (one that serves several queues takes from each in turn). So packages
are imported first ones first: the first package of every course, then the second of every
course, and so on (a course's packages in the order of their folders' names, the order its
students meet them: t1, t2, …); within one round, the cheapest to validate first
(`validation_cost`). A course's first task then opens for students a few seconds after the
instructor's creation instead of after every package of the courses before it (on a 2-core
runner the shipped packages take two to three minutes in all).
"""

from __future__ import annotations

import ast
import sys
import tomllib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import ValidationError
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from runners.protocol import Manifest
from server.models import Course, User
from server.services.packages import assignments as assignment_service
from server.services.people import courses as course_service
from server.services.records.errors import DomainError

LAUNCH_COST = {"python": 0, "mpirun": 1, "sbatch": 1, "torchrun": 2}
"""What a package's launcher adds to each run of its validation, cheapest first: one Python
process; MPI ranks started by mpirun (or a batch script's srun line); torchrun's rendezvous
(with `import torch` in each rank)."""
LIGHT = frozenset({"numpy", "pytest", "runners", "paragrade_service"}) | sys.stdlib_module_names
"""Modules a sandbox loads quickly (paragrade_service: the package's own service hook, under the
name the grader registers it by); any other a package's code imports (dask, joblib, numba,
torch, mpi4py, …) costs each run of its validation a second or more of imports or JIT
compilation, and a validation runs the package's code about ten times."""


@dataclass(frozen=True)
class ShippedCourse:
    slug: str
    title: str
    packages: list[Path]  # package folders, in the order of their names


@dataclass
class Imported:
    """What importing the shipped courses did."""

    packages: list[str] = field(default_factory=list)  # `course/slug` of each imported
    join_codes: dict[str, str] = field(default_factory=dict)  # by course slug
    problems: list[str] = field(default_factory=list)  # one line each, for the operator


def find(root: Path) -> tuple[list[ShippedCourse], list[str]]:
    """Every course folder under `root` and its packages; a problem line for each folder whose
    `course.toml` has no usable title."""
    found, problems = [], []
    for meta in sorted(root.glob("*/course.toml")):
        try:
            title = str(tomllib.loads(meta.read_text(encoding="utf-8"))["title"])
        except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError, KeyError) as exc:
            problems.append(f"{meta}: no usable title ({exc})")
            continue
        packages = [m.parent for m in sorted(meta.parent.glob("*/assignment.toml"))]
        found.append(ShippedCourse(slug=meta.parent.name, title=title, packages=packages))
    return found, problems


def validation_cost(folder: Path) -> tuple[int, int]:
    """How heavy the package's validation is on a CPU runner, as far as its files tell (lower
    first): GPU and multi-node packages last (they need a GPU or nodes, and their checks are
    the longest); then, added up, its launcher's
    cost, each library beyond `LIGHT` its code imports, and the extra sandboxes of a job array.
    A package that cannot be read sorts last (its import reports the problem)."""
    try:
        m = Manifest.model_validate(tomllib.loads((folder / "assignment.toml").read_text("utf-8")))
        heavy = _libraries(folder) - LIGHT - {p.stem for p in folder.rglob("*.py")}
    except (OSError, UnicodeDecodeError, SyntaxError, ValueError, tomllib.TOMLDecodeError,
            ValidationError):
        return (2, 0)
    array = 0 if m.array is None else m.array.tasks
    cost = LAUNCH_COST.get(m.launcher.kind, len(LAUNCH_COST)) + len(heavy) + array
    return (int(m.resources.kind == "gpu" or m.resources.nodes > 1), cost)


def _libraries(folder: Path) -> set[str]:
    """The top-level modules the package's Python files import (absolute imports only)."""
    names: set[str] = set()
    for path in folder.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_bytes(), filename=str(path))):
            if isinstance(node, ast.Import):
                names |= {a.name.split(".")[0] for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                names.add(node.module.split(".")[0])
    return names


def round_order(courses: list[ShippedCourse],
                cost: Callable[[Path], tuple[int, int]] = validation_cost
                ) -> list[tuple[ShippedCourse, Path]]:
    """Every package of `courses`, in the order they are to be validated (the module's
    docstring says why): round by round, a course's n-th package in round n; within a round,
    cheapest first, ties in the order of the courses."""
    rounds = max((len(c.packages) for c in courses), default=0)
    order: list[tuple[ShippedCourse, Path]] = []
    for n in range(rounds):
        here = [(c, c.packages[n]) for c in courses if n < len(c.packages)]
        order += sorted(here, key=lambda item: cost(item[1]))  # stable: ties keep course order
    return order


def import_all(*, sessions: sessionmaker[Session], root: Path, artifacts_root: Path
               ) -> Imported:
    """Create each shipped course (owned by the first instructor) and import its packages in
    `round_order`, each in its own transaction (its validation is published as it commits); a
    package unchanged since the last start is not imported again. Nothing without an
    instructor."""
    done = Imported()
    courses, done.problems = find(root)
    with sessions() as session, session.begin():
        owner = session.scalar(select(User).where(User.is_instructor.is_(True)).order_by(User.id))
        if owner is None:
            return done
        for c in courses:
            course = session.scalar(select(Course).where(Course.slug == c.slug))
            if course is None:
                course = course_service.create(session=session, actor=owner, slug=c.slug,
                                               title=c.title)
            done.join_codes[c.slug] = course.join_code
    for c, folder in round_order(courses):
        try:
            with sessions() as session, session.begin():  # a refused package: rolled back
                owner = session.scalar(select(User).where(User.is_instructor.is_(True))
                                       .order_by(User.id))
                course = session.scalar(select(Course).where(Course.slug == c.slug))
                assert owner is not None and course is not None
                assignment_service.import_files(
                    session=session, actor=owner, course=course,
                    files=assignment_service.read_folder(folder), artifacts_root=artifacts_root,
                    role=course_service.role(session=session, user=owner, course=course),
                    shipped=True)
        except DomainError as exc:
            done.problems.append(f"{c.slug}/{folder.name}: {exc.message}")
            continue
        done.packages.append(f"{c.slug}/{folder.name}")
    return done
