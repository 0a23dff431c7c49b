"""final runs: after the deadline, every student's counted submission timed again in rounds;
their turns (one job each) and the final grades they settle

Revision ID: 0020
Revises: 0019
Create Date: 2026-11-28 18:00:00
"""
from alembic import op
import sqlalchemy as sa


revision = '0020'
down_revision = '0019'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        'final_runs',
        sa.Column('id', sa.Integer(), nullable=False),
        sa.Column('assignment_id', sa.Integer(), nullable=False),
        sa.Column('started_by', sa.Integer(), nullable=True),
        sa.Column('automatic', sa.Boolean(), nullable=False),
        sa.Column('rounds', sa.Integer(), nullable=False),
        sa.Column('status', sa.String(length=16), nullable=False),
        sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
        sa.Column('finished_at', sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(['assignment_id'], ['assignments.id'], ondelete='CASCADE'),
        sa.ForeignKeyConstraint(['started_by'], ['users.id'], ondelete='SET NULL'),
        sa.PrimaryKeyConstraint('id'),
    )
    op.create_index('ix_final_runs_assignment_id', 'final_runs', ['assignment_id'])
    op.create_index('ix_final_runs_status', 'final_runs', ['status'])
    running = sa.text("status = 'running'")
    op.create_index('ix_final_runs_one_running', 'final_runs', ['assignment_id'], unique=True,
                    postgresql_where=running, sqlite_where=running)
    op.create_table(
        'final_turns',
        sa.Column('id', sa.Integer(), nullable=False),
        sa.Column('run_id', sa.Integer(), nullable=False),
        sa.Column('user_id', sa.Integer(), nullable=False),
        sa.Column('submission_id', sa.Integer(), nullable=False),
        sa.Column('round', sa.Integer(), nullable=False),
        sa.Column('status', sa.String(length=16), nullable=False),
        sa.Column('measured', sa.Float(), nullable=True),
        sa.Column('earned', sa.Float(), nullable=True),
        sa.Column('ci_low', sa.Float(), nullable=True),
        sa.Column('ci_high', sa.Float(), nullable=True),
        sa.Column('runner', sa.String(length=200), nullable=True),
        sa.Column('timed_s', sa.Float(), nullable=True),
        sa.Column('error', sa.Text(), nullable=True),
        sa.Column('finished_at', sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(['run_id'], ['final_runs.id'], ondelete='CASCADE'),
        sa.ForeignKeyConstraint(['user_id'], ['users.id'], ondelete='CASCADE'),
        sa.ForeignKeyConstraint(['submission_id'], ['submissions.id'], ondelete='CASCADE'),
        sa.PrimaryKeyConstraint('id'),
    )
    op.create_index('ix_final_turns_run_id', 'final_turns', ['run_id'])
    op.create_table(
        'final_grades',
        sa.Column('run_id', sa.Integer(), nullable=False),
        sa.Column('user_id', sa.Integer(), nullable=False),
        sa.Column('assignment_id', sa.Integer(), nullable=False),
        sa.Column('submission_id', sa.Integer(), nullable=False),
        sa.Column('speedup', sa.Float(), nullable=True),
        sa.Column('ci_low', sa.Float(), nullable=True),
        sa.Column('ci_high', sa.Float(), nullable=True),
        sa.Column('score', sa.Float(), nullable=False),
        sa.Column('turns', sa.Integer(), nullable=False),
        sa.ForeignKeyConstraint(['run_id'], ['final_runs.id'], ondelete='CASCADE'),
        sa.ForeignKeyConstraint(['user_id'], ['users.id'], ondelete='CASCADE'),
        sa.ForeignKeyConstraint(['assignment_id'], ['assignments.id'], ondelete='CASCADE'),
        sa.ForeignKeyConstraint(['submission_id'], ['submissions.id'], ondelete='CASCADE'),
        sa.PrimaryKeyConstraint('run_id', 'user_id'),
    )
    op.create_index('ix_final_grades_assignment_id', 'final_grades', ['assignment_id'])
    with op.batch_alter_table('jobs') as batch_op:
        batch_op.add_column(sa.Column('turn_id', sa.Integer(), nullable=True))
        batch_op.create_foreign_key('fk_jobs_turn_id', 'final_turns', ['turn_id'], ['id'],
                                    ondelete='CASCADE')


def downgrade() -> None:
    with op.batch_alter_table('jobs') as batch_op:
        batch_op.drop_constraint('fk_jobs_turn_id', type_='foreignkey')
        batch_op.drop_column('turn_id')
    op.drop_table('final_grades')
    op.drop_table('final_turns')
    op.drop_table('final_runs')
