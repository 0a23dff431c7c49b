"""a final run on a busy node: each turn keeps what the node delivered, a busy turn is timed
again until the run's limit, and a final grade says when the node stayed busy (live points kept)

Revision ID: 0023
Revises: 0022
Create Date: 2026-12-01 21:40:00
"""
from alembic import op
import sqlalchemy as sa


revision = '0023'
down_revision = '0022'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('final_runs') as batch:
        batch.add_column(sa.Column('busy_until', sa.DateTime(timezone=True), nullable=True))
    with op.batch_alter_table('final_turns') as batch:
        batch.add_column(sa.Column('node', sa.JSON(), nullable=True))
    with op.batch_alter_table('final_grades') as batch:
        batch.add_column(sa.Column('node_busy', sa.Boolean(), server_default=sa.false(),
                                   nullable=False))


def downgrade() -> None:
    with op.batch_alter_table('final_grades') as batch:
        batch.drop_column('node_busy')
    with op.batch_alter_table('final_turns') as batch:
        batch.drop_column('node')
    with op.batch_alter_table('final_runs') as batch:
        batch.drop_column('busy_until')
