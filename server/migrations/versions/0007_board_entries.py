"""each student's leaderboard submission, kept as grades land (the board reads one row a student)

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-23 20:40:00
"""
from alembic import op
import sqlalchemy as sa


revision = '0007'
down_revision = '0006'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        'board_entries',
        sa.Column('assignment_id', sa.Integer(), nullable=False),
        sa.Column('user_id', sa.Integer(), nullable=False),
        sa.Column('submission_id', sa.Integer(), nullable=False),
        sa.ForeignKeyConstraint(['assignment_id'], ['assignments.id'], ondelete='CASCADE'),
        sa.ForeignKeyConstraint(['user_id'], ['users.id'], ondelete='CASCADE'),
        sa.ForeignKeyConstraint(['submission_id'], ['submissions.id'], ondelete='CASCADE'),
        sa.PrimaryKeyConstraint('assignment_id', 'user_id'),
    )
    op.create_index('ix_board_entries_submission_id', 'board_entries', ['submission_id'])
    # The boards of the grades stored so far, chosen as services/grades/leaderboard.py `_best` chose
    # them when this revision was written (plain SQL: later models must not change history).
    op.execute("""
        INSERT INTO board_entries (assignment_id, user_id, submission_id)
        SELECT assignment_id, user_id, id FROM (
            SELECT s.assignment_id, s.user_id, s.id, row_number() OVER (
                PARTITION BY s.assignment_id, s.user_id ORDER BY
                    CASE WHEN r.credit_status IN ('held', 'refused')
                          AND (r.review IS NULL OR r.review != 'granted') THEN 1 ELSE 0 END,
                    COALESCE(r.credited_speedup, -1.0) DESC, r.score DESC, s.id) AS nth
            FROM submissions s JOIN grade_reports r ON r.submission_id = s.id
            WHERE r.verdict = 'passed') best
        WHERE nth = 1""")


def downgrade() -> None:
    op.drop_index('ix_board_entries_submission_id', table_name='board_entries')
    op.drop_table('board_entries')
