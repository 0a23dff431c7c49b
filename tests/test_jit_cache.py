"""numba's compiled code kept across one grading's tests (runners/harness/jitcache.py): a later
test loads what the first compiled, the folder keeps only what numba writes, a replaced folder
loses the sandbox, and no other grading's sandbox sees any of it."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from pathlib import Path

import pytest

from runners.runs.runconfig import RunConfig
from runners.runs.stage import Stage
from runners.runs.zygote import Zygote
from runners.sandbox import Limits, create_executor
from runners.settings import get_settings

SOURCE = (Path(__file__).parent / "hostile" / "jit_cache.py").read_bytes()
EXTENDING = (Path(__file__).parent / "hostile" / "jit_extending.py").read_bytes()
pytestmark = pytest.mark.slow
_n = itertools.count()


def config(stage: Stage, source: bytes = SOURCE) -> RunConfig:
    settings = get_settings()
    code = stage.add_code(f"jit-{next(_n)}", {"solution.py": source})
    return RunConfig(executor=create_executor(settings, "bwrap"), runtime_dir=settings.runtime_dir,
                     stage=stage, code_dir=code, entry_file="solution.py", launcher="python",
                     ranks=1, limits=Limits(cpus=(0,), wall_s=30, memory_mb=1024))


@pytest.fixture
def zygote(stage: Stage) -> Iterator[Zygote]:
    z = Zygote(config(stage), ["numba", "numpy"], jit_cache=True)
    z.start()
    assert z.usable
    yield z
    z.discard()


def one_test(z: Zygote, *calls: tuple[object, ...]) -> list[object]:
    s = z.session()
    s.start()
    try:
        return [s.call(str(c[0]), *c[1:])[0] for c in calls]
    finally:
        s.close()


def test_a_later_test_loads_what_the_first_compiled(zygote: Zygote) -> None:
    assert one_test(zygote, ("run",)) == [[0, 1]]  # compiled, and saved
    assert one_test(zygote, ("run",), ("from_exec",)) == [[1, 0], 42]  # loaded; exec'd code runs
    assert zygote.usable
    cached = one_test(zygote, ("listing",))[0]
    assert isinstance(cached, list)
    files = [p for p in cached if "/" in p]
    # only the submission's own functions, not numba's nor the exec'd one
    assert files and all(Path(p).name.startswith("solution.") for p in files), cached
    assert {Path(p).suffix for p in files} == {".nbi", ".nbc"}


def test_what_a_later_test_loads_is_what_it_would_compile(zygote: Zygote) -> None:
    """A function that reads a value (numba freezes it), directly or through a jitted callee,
    or calls a jitted closure rebound before its first call, is compiled, not cached; so are
    same-line lambdas, a closure over what numba's key cannot pickle and mutual recursion (which
    crashes numba's own cache in a later process); one function jitted with two sets of options
    keeps each."""
    first = (("scaled", 2.0, 1.0), ("lambdas",), ("locked",), ("options",),
             ("indirect", 1, "add"), ("recursive", 7))
    assert one_test(zygote, *first) == [4.0, [20, 30], 6, [float("inf"), True], [1, 10.0],
                                        [False, True]]
    later = (("scaled", 5.0, 1.0), ("lambdas",), ("locked",), ("options",),
             ("indirect", 5, "mul"), ("recursive", 7))
    assert one_test(zygote, *later) == [10.0, [20, 30], 6, [float("inf"), True], [5, 24.0],
                                        [False, True]]
    assert one_test(zygote, ("scaled", 2.0, 3.0), ("indirect", 2, "add")) == [12.0, [2, 10.0]]
    assert zygote.usable


def test_the_folder_keeps_only_what_numba_writes(zygote: Zygote) -> None:
    one_test(zygote, ("run",), ("plant",))
    assert zygote.usable
    hits, listing = one_test(zygote, ("run",), ("listing",))
    assert hits == [1, 0]  # the folder's modes put back: still read
    assert isinstance(listing, list)
    names = {Path(p).name for p in listing}
    # not numba's names, a link, a second link to a file, a folder of its own: removed
    assert not {"canary.txt", "canary.nbi", "solution.link-1.py311.nbi", "solution.hard-1.py311.nbi",
                "stash"} & names, listing
    # a file named as numba names them stays: only the submission's children read it
    assert "solution.canary-1.py311.nbi" in names


def test_a_replaced_folder_loses_the_sandbox(zygote: Zygote) -> None:
    one_test(zygote, ("run",), ("replace",))
    assert not zygote.usable


def test_a_submission_that_extends_numba_is_never_cached(stage: Stage) -> None:
    """What an overload reads as numba types the call is in no key."""
    z = Zygote(config(stage, EXTENDING), ["numba", "numpy"], jit_cache=True)
    z.start()
    try:
        assert one_test(z, ("run", 2.0)) == [6.0]
        assert one_test(z, ("run", 3.0), ("listing",)) == [9.0, []]
    finally:
        z.discard()


def test_a_zygote_for_timed_calls_keeps_nothing(stage: Stage) -> None:
    z = Zygote(config(stage), ["numba", "numpy"])  # as FreshCalls makes it
    z.start()
    try:
        assert one_test(z, ("run",)) == one_test(z, ("run",)) == [[0, 1]]
    finally:
        z.discard()


def test_another_grading_sees_nothing_of_this_ones_cache(stage: Stage) -> None:
    first = Zygote(config(stage), ["numba", "numpy"], jit_cache=True)
    first.start()
    try:
        one_test(first, ("run",), ("plant",))
    finally:
        first.discard()
    second = Zygote(config(stage), ["numba", "numpy"], jit_cache=True)
    second.start()
    try:
        listing, hits = one_test(second, ("listing",), ("run",))
        # only what this child's import compiled (the eager ufunc): no canary, nothing loaded
        assert isinstance(listing, list)
        assert {Path(p).name.split("-")[0] for p in listing if "/" in p} == {"solution.double"}
        assert hits == [0, 1]
    finally:
        second.discard()


@pytest.mark.parametrize("setting", ["true", "false"])
def test_an_operator_can_turn_it_off(stage: Stage, setting: str,
                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """PARAGRADE_JIT_CACHE=false: the tests' zygote is made without it (each test compiles)."""
    from runners import package
    from runners.grading import pytest_plugin
    from runners.settings import REPO_ROOT

    monkeypatch.setenv("PARAGRADE_JIT_CACHE", setting)
    get_settings.cache_clear()
    made: list[bool] = []

    class Asked(Zygote):
        def __init__(self, *args: object, jit_cache: bool = False) -> None:
            made.append(jit_cache)
            raise OSError("not started: what it was asked is all this test reads")

    monkeypatch.setattr(pytest_plugin, "Zygote", Asked)
    a = package.load(REPO_ROOT / "assignments" / "parallel-python" / "numba-parallel")
    try:
        with pytest.raises(OSError):
            pytest_plugin._ZygoteKeeper().session(config(stage), a, None)
    finally:
        get_settings.cache_clear()
    assert made == [setting == "true"]
