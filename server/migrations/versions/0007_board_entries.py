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
    # The boards of the grades stored so far, chosen as the service chooses them.
    from sqlalchemy.orm import Session

    from server.services import leaderboard

    with Session(bind=op.get_bind()) as session:
        leaderboard.rebuild_all(session=session)
        session.flush()


def downgrade() -> None:
    op.drop_index('ix_board_entries_submission_id', table_name='board_entries')
    op.drop_table('board_entries')
