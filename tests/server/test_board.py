"""The leaderboard's own table (one row a student): after every way a grade changes (it lands,
a regrade replaces it, a review decides, the curve is re-scored) it names the submission a full
recomputation over every stored report would choose."""

from __future__ import annotations

import random

from sqlalchemy import Engine, select

from server.db import session_factory
from server.models import Assignment, BoardEntry
from server.services.grades import leaderboard
from tests.server.conftest import REFERENCE, World
from tests.server.reports import sample_report, store

BOARD = "/api/courses/th/assignments/t1-multiprocessing/leaderboard"


def _agrees(engine: Engine, world: World | None = None) -> set[tuple[int, int]]:
    """The kept table equals a full recomputation; with `world`, the board the API serves (from
    the server's cache) equals one computed afresh from the database."""
    with session_factory(engine)() as s:
        a = s.scalars(select(Assignment)).one()
        kept = {(int(u), int(i)) for u, i in s.execute(
            select(BoardEntry.user_id, BoardEntry.submission_id)
            .where(BoardEntry.assignment_id == a.id))}
        full = set(s.execute(leaderboard._best(a.id)).all())
        fresh = [(e.submission_id, e.rank, e.tied, e.speedup, e.mark)
                 for e in leaderboard.entries(session=s, assignment=a)]
    assert kept == full
    if world is not None:
        served = [(e["submission_id"], e["rank"], e["tied"], e["speedup"], e["mark"])
                  for e in world.get(world.prof, BOARD).json()]
        assert served == fresh
    return kept


def test_the_board_table_follows_every_change_of_a_grade(world: World, engine: Engine) -> None:
    rng = random.Random(3)
    subs: list[int] = []
    credits = (None, "credited", "capped", "held", "refused")
    for i in range(12):
        who = (world.ada, world.bob)[i % 2]
        subs.append(int(world.submit(who, REFERENCE).json()["id"]))
        med = rng.uniform(0.8, 3.0)
        store(engine, subs[-1], sample_report(passed=rng.random() < 0.8, median=med,
                                              lo=med - 0.1, hi=med + 0.1,
                                              credit=rng.choice(credits)))
        assert _agrees(engine, world)
    best = _agrees(engine)
    # A regrade that fails the best submission: the student falls back to the next best.
    user, sid = sorted(best)[0]
    store(engine, sid, sample_report(passed=False))
    assert (user, sid) not in _agrees(engine, world)
    # Reviews move a held or refused speedup in and out of the ranking.
    held = subs[-1]
    store(engine, held, sample_report(median=9.0, lo=8.5, hi=9.5, credit="held"))
    _agrees(engine)
    for decision in ("grant", "refuse"):
        r = world.post(world.prof, f"/api/submissions/{held}/review", json={"decision": decision})
        assert r.status_code == 200, r.text
        _agrees(engine, world)
    # A changed curve re-scores every grade (scores decide between equal speedups).
    r = world.client.patch("/api/courses/th/assignments/t1-multiprocessing",
                           json={"speedup_full": 4.0}, headers=world.prof)
    assert r.status_code == 200, r.text
    _agrees(engine, world)
    board = world.get(world.ada, BOARD).json()
    kept = {sid for _, sid in _agrees(engine)}
    assert len(board) == len(kept)
    assert next(e["submission_id"] for e in board if e["you"]) in kept  # only one's own id shows


def test_a_board_is_computed_once_per_version() -> None:
    cache = leaderboard.BoardCache(size=2)
    calls: list[int] = []

    def board(n: int) -> object:
        calls.append(n)
        return n

    assert cache.get(1, 0, lambda: board(1)) == 1
    assert cache.get(1, 0, lambda: board(2)) == 1 and calls == [1]  # same version: the cached one
    assert cache.get(1, 1, lambda: board(3)) == 3 and calls == [1, 3]
    for other in (2, 3):  # least recently used boards leave a full cache
        cache.get(other, 0, lambda o=other: board(o * 10))
    assert cache.get(1, 1, lambda: board(4)) == 4
    # An older version computed late never replaces a newer one.
    assert cache.get(1, 0, lambda: board(5)) == 5
    assert cache.get(1, 1, lambda: board(6)) == 4


def test_each_reader_sees_their_own_row_in_the_shared_board(world: World, engine: Engine) -> None:
    from tests.server.test_pages import browser

    for who, median in ((world.ada, 2.0), (world.bob, 1.5)):
        store(engine, int(world.submit(who, REFERENCE).json()["id"]),
              sample_report(median=median, lo=median - 0.1, hi=median + 0.1))
    for name, who in (("ada", world.ada), ("bob", world.bob), ("ada", world.ada)):
        board = world.get(who, BOARD).json()
        assert [(e["alias"], e["you"], e["submission_id"] is not None) for e in board] == [
            (alias, alias == name, alias == name) for alias in ("ada", "bob")]
        page = browser(world, f"{name}@uni.edu", "studentpass1").get(
            "/c/th/t1-multiprocessing/leaderboard").text
        assert page.count("(you)") == 1 and f"{name} (you)" in page
    prof = world.get(world.prof, BOARD).json()
    assert not any(e["you"] for e in prof) and all(e["submission_id"] for e in prof)
