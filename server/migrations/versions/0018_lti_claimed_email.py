"""an LMS identity keeps the email its LMS asserted (unverified, shown to the course's staff);
an account owns an email only where the operator trusts that LMS for the email's domain

Revision ID: 0018
Revises: 0017
Create Date: 2026-11-27 19:00:00
"""
from alembic import op
import sqlalchemy as sa


revision = '0018'
down_revision = '0017'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('lti_identities') as batch_op:
        batch_op.add_column(sa.Column('email', sa.String(length=320), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('lti_identities') as batch_op:
        batch_op.drop_column('email')
