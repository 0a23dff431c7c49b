"""an instructor's scoring curve per assignment

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-22 17:35:00
"""
from alembic import op
import sqlalchemy as sa


revision = '0004'
down_revision = '0003'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('assignments', schema=None) as batch_op:
        batch_op.add_column(sa.Column('speedup_min', sa.Float(), nullable=True))
        batch_op.add_column(sa.Column('speedup_full', sa.Float(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('assignments', schema=None) as batch_op:
        batch_op.drop_column('speedup_full')
        batch_op.drop_column('speedup_min')
