"""per-student deadline extensions and the course roster; the foreign key 0001 never made

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
    if op.get_bind().dialect.name != 'sqlite':
        op.create_foreign_key('fk_assignments_current_version_id', 'assignments',
                              'assignment_versions', ['current_version_id'], ['id'],
                              ondelete='SET NULL')


def downgrade() -> None:
    if op.get_bind().dialect.name != 'sqlite':
        op.drop_constraint('fk_assignments_current_version_id', 'assignments',
                           type_='foreignkey')
    op.drop_table('roster_entries')
    op.drop_table('extensions')
