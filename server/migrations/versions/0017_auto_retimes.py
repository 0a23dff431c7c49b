"""a submission counts the gradings the platform started again by itself, so that a grading
measured while the node was short of cores is timed again once, later, and never in a loop

Revision ID: 0017
Revises: 0016
Create Date: 2026-11-25 21:00:00
"""
from alembic import op
import sqlalchemy as sa


revision = '0017'
down_revision = '0016'
branch_labels = None
depends_on = None


def upgrade() -> None:
    # Gradings stored before this column are not timed again: their marks stay as they are.
    with op.batch_alter_table('submissions') as batch_op:
        batch_op.add_column(sa.Column('auto_retimes', sa.Integer(), nullable=False,
                                      server_default='0'))
    op.execute("UPDATE submissions SET auto_retimes = 1 WHERE id IN "
               "(SELECT submission_id FROM grade_reports WHERE timing_interfered)")


def downgrade() -> None:
    with op.batch_alter_table('submissions') as batch_op:
        batch_op.drop_column('auto_retimes')
