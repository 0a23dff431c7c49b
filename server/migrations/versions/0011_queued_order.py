"""a queued job's place in its queue, counted over queued jobs only

Revision ID: 0011
Revises: 0010
Create Date: 2026-11-24 08:40:00
"""
from alembic import op
import sqlalchemy as sa


revision = '0011'
down_revision = '0010'
branch_labels = None
depends_on = None


def upgrade() -> None:
    queued = sa.text("state = 'queued'")
    op.create_index('ix_jobs_queued_order', 'jobs', ['queue', 'priority', 'id'],
                    postgresql_where=queued, sqlite_where=queued)


def downgrade() -> None:
    op.drop_index('ix_jobs_queued_order', table_name='jobs')
