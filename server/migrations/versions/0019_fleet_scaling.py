"""runners that follow the queue: a pilot's credential expires with its batch job; what the
fleet scaler decided for each queue

Revision ID: 0019
Revises: 0018
Create Date: 2026-11-28 02:00:00
"""
from alembic import op
import sqlalchemy as sa


revision = '0019'
down_revision = '0018'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('runner_credentials') as batch_op:
        batch_op.add_column(sa.Column('expires_at', sa.DateTime(timezone=True), nullable=True))
    op.create_table(
        'queue_scale',
        sa.Column('queue', sa.String(length=16), nullable=False),
        sa.Column('desired', sa.Integer(), nullable=False),
        sa.Column('pending', sa.Integer(), nullable=False),
        sa.Column('running', sa.Integer(), nullable=False),
        sa.Column('reason', sa.String(length=500), nullable=False),
        sa.Column('start_s', sa.Float(), nullable=True),
        sa.Column('updated_at', sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint('queue'),
    )


def downgrade() -> None:
    op.drop_table('queue_scale')
    with op.batch_alter_table('runner_credentials') as batch_op:
        batch_op.drop_column('expires_at')
