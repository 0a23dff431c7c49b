"""graded profiles: an assignment may ask for one profiled call after each graded grading's
timing (off by default: it costs runner time)

Revision ID: 0025
Revises: 0024
Create Date: 2026-12-02 19:00:00
"""
from alembic import op
import sqlalchemy as sa


revision = '0025'
down_revision = '0024'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('assignments') as batch:
        batch.add_column(sa.Column('graded_profiles', sa.Boolean(), server_default=sa.false(),
                                   nullable=False))


def downgrade() -> None:
    with op.batch_alter_table('assignments') as batch:
        batch.drop_column('graded_profiles')
