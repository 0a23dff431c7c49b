"""a stored grade says whether its speedup was measured while the node was short of cores

Revision ID: 0015
Revises: 0014
Create Date: 2026-11-25 17:05:00
"""
from alembic import op
import sqlalchemy as sa


revision = '0015'
down_revision = '0014'
branch_labels = None
depends_on = None


def upgrade() -> None:
    # Grades stored before the node was probed around timed windows say nothing of it.
    with op.batch_alter_table('grade_reports') as batch_op:
        batch_op.add_column(sa.Column('timing_interfered', sa.Boolean(), nullable=False,
                                      server_default=sa.false()))


def downgrade() -> None:
    with op.batch_alter_table('grade_reports') as batch_op:
        batch_op.drop_column('timing_interfered')
