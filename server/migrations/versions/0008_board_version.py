"""a counter each leaderboard change bumps, so a board is computed once per change

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-23 23:30:00
"""
from alembic import op
import sqlalchemy as sa


revision = '0008'
down_revision = '0007'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('assignments') as batch:
        batch.add_column(sa.Column('board_version', sa.Integer(), nullable=False,
                                   server_default='0'))


def downgrade() -> None:
    with op.batch_alter_table('assignments') as batch:
        batch.drop_column('board_version')
