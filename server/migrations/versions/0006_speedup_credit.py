"""what the credit policy made of each stored speedup, and an instructor's review of it

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-23 08:00:00
"""
from alembic import op
import sqlalchemy as sa


revision = '0006'
down_revision = '0005'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('grade_reports', schema=None) as batch_op:
        batch_op.add_column(sa.Column('credit_status', sa.String(length=16), nullable=True))
        batch_op.add_column(sa.Column('credited_speedup', sa.Float(), nullable=True))
        batch_op.add_column(sa.Column('review', sa.String(length=16), nullable=True))
        batch_op.create_index('ix_grade_reports_credit_status', ['credit_status'], unique=False)
    # Reports stored before the policy keep ranking by their measured speedup.
    op.execute("UPDATE grade_reports SET credited_speedup = speedup_median")


def downgrade() -> None:
    with op.batch_alter_table('grade_reports', schema=None) as batch_op:
        batch_op.drop_index('ix_grade_reports_credit_status')
        batch_op.drop_column('review')
        batch_op.drop_column('credited_speedup')
        batch_op.drop_column('credit_status')
