"""a job records when it finished, so that how long jobs take can be told from what they took

Revision ID: 0016
Revises: 0015
Create Date: 2026-11-25 20:00:00
"""
from alembic import op
import sqlalchemy as sa


revision = '0016'
down_revision = '0015'
branch_labels = None
depends_on = None


def upgrade() -> None:
    # Jobs finished before this column say nothing of their length: estimates start from the
    # jobs that finish after it.
    with op.batch_alter_table('jobs') as batch_op:
        batch_op.add_column(sa.Column('finished_at', sa.DateTime(timezone=True), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('jobs') as batch_op:
        batch_op.drop_column('finished_at')
