"""queue and fleet: job priority, publication and lease; the runners table

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-22 16:10:00
"""
from alembic import op
import sqlalchemy as sa


revision = '0003'
down_revision = '0002'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('jobs', schema=None) as batch_op:
        batch_op.add_column(sa.Column('priority', sa.Integer(), nullable=False, server_default='0'))
        batch_op.add_column(sa.Column('published_at', sa.DateTime(timezone=True), nullable=True))
        batch_op.add_column(sa.Column('heartbeat_at', sa.DateTime(timezone=True), nullable=True))
        batch_op.add_column(sa.Column('time_limit_s', sa.Integer(), nullable=False,
                                      server_default='1800'))
    op.create_table(
        'runners',
        sa.Column('name', sa.String(length=200), primary_key=True),
        sa.Column('queues', sa.JSON(), nullable=False),
        sa.Column('capabilities', sa.JSON(), nullable=False),
        sa.Column('current_job_id', sa.Integer(), nullable=True),
        sa.Column('first_seen', sa.DateTime(timezone=True), nullable=False),
        sa.Column('last_seen', sa.DateTime(timezone=True), nullable=False),
    )


def downgrade() -> None:
    op.drop_table('runners')
    with op.batch_alter_table('jobs', schema=None) as batch_op:
        batch_op.drop_column('time_limit_s')
        batch_op.drop_column('heartbeat_at')
        batch_op.drop_column('published_at')
        batch_op.drop_column('priority')
