"""The migrations build the schema the models describe, on SQLite and PostgreSQL (a column,
index or foreign key a model has and no migration made would fail here)."""

from __future__ import annotations

from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import Engine

from server.db import Base


def test_the_migrated_schema_is_the_models_schema(engine: Engine) -> None:
    with engine.connect() as conn:
        diff = compare_metadata(MigrationContext.configure(conn), Base.metadata)
    assert diff == []
