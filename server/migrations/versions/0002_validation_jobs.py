"""validation jobs

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-22 14:57:55.028103
"""
from alembic import op
import sqlalchemy as sa


revision = '0002'
down_revision = '0001'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('assignment_versions', schema=None) as batch_op:
        # Versions imported before validation jobs existed count as ready.
        batch_op.add_column(sa.Column('status', sa.String(length=16), nullable=False,
                                      server_default='ready'))
        batch_op.add_column(sa.Column('checks', sa.JSON(), nullable=True))

    with op.batch_alter_table('jobs', schema=None) as batch_op:
        batch_op.add_column(sa.Column('kind', sa.String(length=16), nullable=False,
                                      server_default='grade'))
        batch_op.add_column(sa.Column('version_id', sa.Integer(), nullable=True))
        batch_op.alter_column('submission_id',
               existing_type=sa.INTEGER(),
               nullable=True)
        batch_op.create_foreign_key('fk_jobs_version_id', 'assignment_versions', ['version_id'], ['id'],
                                    ondelete='CASCADE')



def downgrade() -> None:
    with op.batch_alter_table('jobs', schema=None) as batch_op:
        batch_op.drop_constraint('fk_jobs_version_id', type_='foreignkey')
        batch_op.alter_column('submission_id',
               existing_type=sa.INTEGER(),
               nullable=False)
        batch_op.drop_column('version_id')
        batch_op.drop_column('kind')

    with op.batch_alter_table('assignment_versions', schema=None) as batch_op:
        batch_op.drop_column('checks')
        batch_op.drop_column('status')

