"""Schema migrations (Alembic), run programmatically: no create_all in production paths."""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config

MIGRATIONS = Path(__file__).resolve().parent / "migrations"


def config(url: str) -> Config:
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    cfg.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return cfg


def upgrade(url: str, revision: str = "head") -> None:
    """Bring the database at `url` to `revision`."""
    command.upgrade(config(url), revision)


def downgrade(url: str, revision: str) -> None:
    """Take the database at `url` back to `revision` (an earlier release's): its rows stay, what
    the later migrations added goes."""
    command.downgrade(config(url), revision)
