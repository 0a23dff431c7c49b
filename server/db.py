"""Engine and sessions."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from functools import lru_cache
from typing import Any

from sqlalchemy import Engine, Integer, any_, bindparam, create_engine, event, select, update
from sqlalchemy.dialects import postgresql
from sqlalchemy.orm import DeclarativeBase, Session, sessionmaker

from server.settings import get_settings


class Base(DeclarativeBase):
    """Declarative base of every table."""


def make_engine(url: str) -> Engine:
    if url.startswith("sqlite"):
        engine = create_engine(url, connect_args={"check_same_thread": False})

        @event.listens_for(engine, "connect")
        def _pragmas(conn, _record):  # type: ignore[no-untyped-def]
            cur = conn.cursor()
            cur.execute("PRAGMA foreign_keys=ON")
            cur.execute("PRAGMA journal_mode=WAL")
            cur.execute("PRAGMA busy_timeout=5000")
            cur.close()

        return engine
    return create_engine(url, pool_pre_ping=True)


@lru_cache
def get_engine() -> Engine:
    return make_engine(get_settings().database_url)


def session_factory(engine: Engine | None = None) -> sessionmaker[Session]:
    return sessionmaker(engine or get_engine(), expire_on_commit=False)


@contextmanager
def committing(session: Session) -> Iterator[None]:
    """Commit what the block did, or roll it all back: a refused request stores nothing."""
    try:
        yield
        session.commit()
    except BaseException:
        session.rollback()
        raise


def hold(session: Session, model: Any, row_id: int) -> bool:
    """Take this row's changes one at a time until the transaction ends, so that a check and the
    write it allows are one step; False if the row is gone. A row lock on PostgreSQL; on SQLite
    the database's one write lock, taken by a write that changes nothing (the transaction's
    reads then see every committed change)."""
    if session.get_bind().dialect.name == "sqlite":
        held = session.execute(update(model).where(model.id == row_id).values(id=model.id)
                               .execution_options(synchronize_session=False))
        return bool(held.rowcount)  # type: ignore[attr-defined]
    return session.scalar(select(model.id).where(model.id == row_id).with_for_update()) is not None


def among(session: Session, column: Any, ids: list[int]) -> Any:
    """`column IN ids`: on PostgreSQL one array parameter (`= ANY`), not one per id (compiling
    and binding 2 000 parameters cost more than the query)."""
    if session.get_bind().dialect.name == "postgresql":
        return column == any_(bindparam(None, ids, type_=postgresql.ARRAY(Integer)))
    return column.in_(ids)
