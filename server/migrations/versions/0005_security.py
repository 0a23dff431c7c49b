"""security: token expiry, failed-login throttle, jobs bound to the claiming runner

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-29 10:00:00
"""
from datetime import UTC, datetime, timedelta

from alembic import op
import sqlalchemy as sa


revision = '0005'
down_revision = '0004'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('api_tokens', schema=None) as batch_op:
        batch_op.add_column(sa.Column('expires_at', sa.DateTime(timezone=True), nullable=True))
    # Tokens issued before expiry existed get the default 30 days from now.
    op.execute(sa.text("UPDATE api_tokens SET expires_at = :t WHERE expires_at IS NULL")
               .bindparams(t=datetime.now(UTC) + timedelta(days=30)))
    with op.batch_alter_table('api_tokens', schema=None) as batch_op:
        batch_op.alter_column('expires_at', existing_type=sa.DateTime(timezone=True),
                              nullable=False)
        batch_op.create_index(batch_op.f('ix_api_tokens_expires_at'), ['expires_at'],
                              unique=False)

    op.create_table('login_failures',
                    sa.Column('id', sa.Integer(), nullable=False),
                    sa.Column('email', sa.String(length=320), nullable=False),
                    sa.Column('address', sa.String(length=64), nullable=False),
                    sa.Column('at', sa.DateTime(timezone=True), nullable=False),
                    sa.PrimaryKeyConstraint('id'))
    with op.batch_alter_table('login_failures', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_login_failures_email'), ['email'], unique=False)
        batch_op.create_index(batch_op.f('ix_login_failures_address'), ['address'], unique=False)
        batch_op.create_index(batch_op.f('ix_login_failures_at'), ['at'], unique=False)

    with op.batch_alter_table('jobs', schema=None) as batch_op:
        batch_op.add_column(sa.Column('runner_key_hash', sa.String(length=64), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('jobs', schema=None) as batch_op:
        batch_op.drop_column('runner_key_hash')
    with op.batch_alter_table('login_failures', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_login_failures_at'))
        batch_op.drop_index(batch_op.f('ix_login_failures_address'))
        batch_op.drop_index(batch_op.f('ix_login_failures_email'))
    op.drop_table('login_failures')
    with op.batch_alter_table('api_tokens', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_api_tokens_expires_at'))
        batch_op.drop_column('expires_at')
