"""per-student deadline extensions, the course roster, similarity runs; the foreign key 0001
never made

0001 declared assignments.current_version_id's foreign key with use_alter inside create_table,
which Alembic does not emit: PostgreSQL databases have lacked it since (SQLite checks none).

Revision ID: 0009
Revises: 0008
Create Date: 2026-11-24 09:00:00
"""
from alembic import op
import sqlalchemy as sa


revision = '0009'
down_revision = '0008'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        'extensions',
        sa.Column('id', sa.Integer(), primary_key=True),
        sa.Column('assignment_id', sa.Integer(),
                  sa.ForeignKey('assignments.id', ondelete='CASCADE'), nullable=False),
        sa.Column('user_id', sa.Integer(), sa.ForeignKey('users.id', ondelete='CASCADE'),
                  nullable=False),
        sa.Column('deadline', sa.DateTime(timezone=True), nullable=False),
        sa.Column('reason', sa.String(500), nullable=False),
        sa.Column('granted_by', sa.Integer(), sa.ForeignKey('users.id', ondelete='SET NULL'),
                  nullable=True),
        sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
        sa.UniqueConstraint('assignment_id', 'user_id'),
    )
    op.create_index('ix_extensions_assignment_id', 'extensions', ['assignment_id'])
    op.create_index('ix_extensions_user_id', 'extensions', ['user_id'])
    op.create_table(
        'roster_entries',
        sa.Column('id', sa.Integer(), primary_key=True),
        sa.Column('course_id', sa.Integer(), sa.ForeignKey('courses.id', ondelete='CASCADE'),
                  nullable=False),
        sa.Column('email', sa.String(320), nullable=False),
        sa.Column('name', sa.String(200), nullable=False),
        sa.Column('alias', sa.String(64), nullable=True),
        sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
        sa.UniqueConstraint('course_id', 'email'),
    )
    op.create_index('ix_roster_entries_course_id', 'roster_entries', ['course_id'])
    op.create_index('ix_roster_entries_email', 'roster_entries', ['email'])
    op.create_table(
        'similarity_runs',
        sa.Column('id', sa.Integer(), primary_key=True),
        sa.Column('assignment_id', sa.Integer(),
                  sa.ForeignKey('assignments.id', ondelete='CASCADE'), nullable=False),
        sa.Column('version_id', sa.Integer(),
                  sa.ForeignKey('assignment_versions.id', ondelete='CASCADE'), nullable=False),
        sa.Column('requested_by', sa.Integer(), sa.ForeignKey('users.id', ondelete='SET NULL'),
                  nullable=True),
        sa.Column('basis', sa.String(8), nullable=False),
        sa.Column('threshold', sa.Float(), nullable=False),
        sa.Column('submission_ids', sa.JSON(), nullable=False),
        sa.Column('status', sa.String(16), nullable=False),
        sa.Column('result', sa.JSON(), nullable=True),
        sa.Column('error', sa.Text(), nullable=True),
        sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
        sa.Column('finished_at', sa.DateTime(timezone=True), nullable=True),
    )
    op.create_index('ix_similarity_runs_assignment_id', 'similarity_runs', ['assignment_id'])
    with op.batch_alter_table('jobs') as batch:
        batch.add_column(sa.Column('run_id', sa.Integer(), nullable=True))
        batch.create_foreign_key('fk_jobs_run_id', 'similarity_runs', ['run_id'], ['id'],
                                 ondelete='CASCADE')
    if op.get_bind().dialect.name != 'sqlite':
        op.create_foreign_key('fk_assignments_current_version_id', 'assignments',
                              'assignment_versions', ['current_version_id'], ['id'],
                              ondelete='SET NULL')


def downgrade() -> None:
    if op.get_bind().dialect.name != 'sqlite':
        op.drop_constraint('fk_assignments_current_version_id', 'assignments',
                           type_='foreignkey')
    with op.batch_alter_table('jobs') as batch:
        batch.drop_constraint('fk_jobs_run_id', type_='foreignkey')
        batch.drop_column('run_id')
    op.drop_table('similarity_runs')
    op.drop_table('roster_entries')
    op.drop_table('extensions')
