"""practice runs: a student's file on the grading hardware, public tests only, never graded;
each assignment's practice limits, timing and profile switches and pause

Revision ID: 0024
Revises: 0023
Create Date: 2026-12-02 15:00:00
"""
from alembic import op
import sqlalchemy as sa


revision = '0024'
down_revision = '0023'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        'practice_runs',
        sa.Column('id', sa.Integer(), nullable=False),
        sa.Column('user_id', sa.Integer(), nullable=False),
        sa.Column('assignment_id', sa.Integer(), nullable=False),
        sa.Column('version_id', sa.Integer(), nullable=False),
        sa.Column('archive_sha256', sa.String(length=64), nullable=False),
        sa.Column('filenames', sa.JSON(), nullable=False),
        sa.Column('timed', sa.Boolean(), nullable=False),
        sa.Column('profiled', sa.Boolean(), nullable=False),
        sa.Column('status', sa.String(length=16), nullable=False),
        sa.Column('verdict', sa.String(length=32), nullable=True),
        sa.Column('report', sa.JSON(), nullable=True),
        sa.Column('error', sa.String(length=2000), nullable=True),
        sa.Column('attempts', sa.Integer(), nullable=False),
        sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
        sa.Column('started_at', sa.DateTime(timezone=True), nullable=True),
        sa.Column('finished_at', sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(['archive_sha256'], ['artifacts.sha256']),
        sa.ForeignKeyConstraint(['assignment_id'], ['assignments.id'], ondelete='CASCADE'),
        sa.ForeignKeyConstraint(['user_id'], ['users.id'], ondelete='CASCADE'),
        sa.ForeignKeyConstraint(['version_id'], ['assignment_versions.id']),
        sa.PrimaryKeyConstraint('id'),
    )
    op.create_index('ix_practice_runs_user_id', 'practice_runs', ['user_id'])
    op.create_index('ix_practice_runs_assignment_id', 'practice_runs', ['assignment_id'])
    op.create_index('ix_practice_runs_status', 'practice_runs', ['status'])
    op.create_index('ix_practice_runs_created_at', 'practice_runs', ['created_at'])
    with op.batch_alter_table('jobs') as batch:
        batch.add_column(sa.Column('practice_id', sa.Integer(), nullable=True))
        batch.create_foreign_key('fk_jobs_practice_id', 'practice_runs', ['practice_id'], ['id'],
                                 ondelete='CASCADE')
    with op.batch_alter_table('assignments') as batch:
        batch.add_column(sa.Column('practice_per_hour', sa.Integer(), nullable=True))
        batch.add_column(sa.Column('practice_per_day', sa.Integer(), nullable=True))
        batch.add_column(sa.Column('practice_timing', sa.Boolean(), server_default=sa.true(),
                                   nullable=False))
        batch.add_column(sa.Column('practice_profiles', sa.Boolean(), server_default=sa.true(),
                                   nullable=False))
        batch.add_column(sa.Column('practice_paused_until', sa.DateTime(timezone=True),
                                   nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('assignments') as batch:
        batch.drop_column('practice_paused_until')
        batch.drop_column('practice_profiles')
        batch.drop_column('practice_timing')
        batch.drop_column('practice_per_day')
        batch.drop_column('practice_per_hour')
    with op.batch_alter_table('jobs') as batch:
        batch.drop_constraint('fk_jobs_practice_id', type_='foreignkey')
        batch.drop_column('practice_id')
    op.drop_index('ix_practice_runs_created_at', table_name='practice_runs')
    op.drop_index('ix_practice_runs_status', table_name='practice_runs')
    op.drop_index('ix_practice_runs_assignment_id', table_name='practice_runs')
    op.drop_index('ix_practice_runs_user_id', table_name='practice_runs')
    op.drop_table('practice_runs')
