"""teams: students who hand in one solution per assignment together; each membership's start
and end; a submission's team; each assignment's team sizes, who forms teams and the lock

Revision ID: 0026
Revises: 0025
Create Date: 2026-12-02 19:30:00
"""
from alembic import op
import sqlalchemy as sa


revision = '0026'
down_revision = '0025'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        'teams',
        sa.Column('id', sa.Integer(), nullable=False),
        sa.Column('assignment_id', sa.Integer(), nullable=False),
        sa.Column('name', sa.String(length=80), nullable=False),
        sa.Column('join_code', sa.String(length=32), nullable=False),
        sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
        sa.Column('deadline', sa.DateTime(timezone=True), nullable=True),
        sa.Column('deadline_reason', sa.String(length=500), server_default='', nullable=False),
        sa.ForeignKeyConstraint(['assignment_id'], ['assignments.id'], ondelete='CASCADE'),
        sa.PrimaryKeyConstraint('id'),
        sa.UniqueConstraint('assignment_id', 'name', name='uq_teams_assignment_name'),
        sa.UniqueConstraint('join_code'),
    )
    op.create_index('ix_teams_assignment_id', 'teams', ['assignment_id'])
    op.create_table(
        'team_members',
        sa.Column('id', sa.Integer(), nullable=False),
        sa.Column('team_id', sa.Integer(), nullable=False),
        sa.Column('user_id', sa.Integer(), nullable=False),
        sa.Column('assignment_id', sa.Integer(), nullable=False),
        sa.Column('joined_at', sa.DateTime(timezone=True), nullable=False),
        sa.Column('left_at', sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(['assignment_id'], ['assignments.id'], ondelete='CASCADE'),
        sa.ForeignKeyConstraint(['team_id'], ['teams.id'], ondelete='CASCADE'),
        sa.ForeignKeyConstraint(['user_id'], ['users.id'], ondelete='CASCADE'),
        sa.PrimaryKeyConstraint('id'),
    )
    op.create_index('ix_team_members_team_id', 'team_members', ['team_id'])
    op.create_index('ix_team_members_assignment_user', 'team_members', ['assignment_id', 'user_id'])
    with op.batch_alter_table('submissions') as batch:
        batch.add_column(sa.Column('team_id', sa.Integer(), nullable=True))
        batch.create_foreign_key('fk_submissions_team_id', 'teams', ['team_id'], ['id'])
        batch.create_index('ix_submissions_team_id', ['team_id'])
    with op.batch_alter_table('assignments') as batch:
        batch.add_column(sa.Column('team_max', sa.Integer(), nullable=True))
        batch.add_column(sa.Column('team_min', sa.Integer(), server_default='1', nullable=False))
        batch.add_column(sa.Column('teams_by_students', sa.Boolean(), server_default=sa.true(),
                                   nullable=False))
        batch.add_column(sa.Column('team_lock_at', sa.DateTime(timezone=True), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('assignments') as batch:
        batch.drop_column('team_lock_at')
        batch.drop_column('teams_by_students')
        batch.drop_column('team_min')
        batch.drop_column('team_max')
    with op.batch_alter_table('submissions') as batch:
        batch.drop_index('ix_submissions_team_id')
        batch.drop_constraint('fk_submissions_team_id', type_='foreignkey')
        batch.drop_column('team_id')
    op.drop_index('ix_team_members_assignment_user', table_name='team_members')
    op.drop_index('ix_team_members_team_id', table_name='team_members')
    op.drop_table('team_members')
    op.drop_index('ix_teams_assignment_id', table_name='teams')
    op.drop_table('teams')
