"""Shared fixtures: paths, the shipped course, sandbox sessions over a stage."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from runners import package
from runners.sandbox import Limits, create_executor
from runners.session import RunConfig, Session, Stage
from runners.settings import REPO_ROOT, get_settings

# Timed runs get a third of the default budget in tests (graders and runner processes alike):
# the tests check lenient bounds, not precision; bench/ measures with the defaults.
os.environ.setdefault("PARAGRADE_TIMING_BUDGET_S", "10")
get_settings.cache_clear()

COURSE = REPO_ROOT / "assignments" / "treasure-hunt"
FIXTURES = Path(__file__).parent / "fixtures"


@pytest.fixture(scope="session")
def t1() -> package.Assignment:
    return package.load(COURSE / "t1-multiprocessing")


@pytest.fixture
def stage() -> Iterator[Stage]:
    s = Stage()
    yield s
    s.cleanup()


SessionFactory = Callable[..., Session]


@pytest.fixture(params=["bwrap", "process"])
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def make_session(stage: Stage) -> Iterator[SessionFactory]:
    """Start sessions of a Python source in the sandbox; all are closed at the end."""
    opened: list[Session] = []

    def factory(source: str, *, backend: str = "bwrap", cpus: tuple[int, ...] = (0,),
                wall_s: float = 20, memory_mb: int = 512, launcher: str = "python",
                ranks: int = 1, start: bool = True, **limits: int) -> Session:
        settings = get_settings()
        code = stage.add_code(f"c{len(opened)}", {"solution.py": source.encode()})
        cfg = RunConfig(executor=create_executor(settings, backend),
                        runtime_dir=settings.runtime_dir, stage=stage, code_dir=code,
                        entry_file="solution.py", launcher=launcher, ranks=ranks,
                        limits=Limits(cpus=cpus, wall_s=wall_s, memory_mb=memory_mb, **limits))
        session = Session(cfg)
        opened.append(session)
        if start:
            session.start()
        return session

    yield factory
    for s in opened:
        s.close()
