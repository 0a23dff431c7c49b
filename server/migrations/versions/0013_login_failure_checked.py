"""a failed login says whether its password was checked (the account-wide delay counts those)

Revision ID: 0013
Revises: 0012
Create Date: 2026-11-25 02:20:00
"""
from alembic import op
import sqlalchemy as sa


revision = '0013'
down_revision = '0012'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('login_failures') as batch_op:
        batch_op.add_column(sa.Column('checked', sa.Boolean(), nullable=False,
                                      server_default=sa.true()))


def downgrade() -> None:
    with op.batch_alter_table('login_failures') as batch_op:
        batch_op.drop_column('checked')
