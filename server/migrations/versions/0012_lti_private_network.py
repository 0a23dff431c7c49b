"""an LMS registration says whether its addresses may be loopback or private

Revision ID: 0012
Revises: 0011
Create Date: 2026-11-25 02:20:00
"""
from alembic import op
import sqlalchemy as sa


revision = '0012'
down_revision = '0011'
branch_labels = None
depends_on = None


def upgrade() -> None:
    # Platforms registered before this column were fetched from any address; they keep working
    # only where that address is a public one (an instructor turns this on for a test LMS).
    with op.batch_alter_table('lti_platforms') as batch_op:
        batch_op.add_column(sa.Column('allow_private_network', sa.Boolean(), nullable=False,
                                      server_default=sa.false()))


def downgrade() -> None:
    with op.batch_alter_table('lti_platforms') as batch_op:
        batch_op.drop_column('allow_private_network')
