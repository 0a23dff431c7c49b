"""regrade requests for every grade: about a submission (its assignment's), a released hand
grade only where there was one, a rubric item's title as the student saw it, the performance
points, and whether the answer queued the submission to be graded again

Revision ID: 0027
Revises: 0026
Create Date: 2026-12-02 22:20:00
"""
from alembic import op
import sqlalchemy as sa


revision = '0027'
down_revision = '0026'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('regrade_requests') as batch:
        batch.add_column(sa.Column('assignment_id', sa.Integer(), nullable=True))
        batch.add_column(sa.Column('submission_id', sa.Integer(), nullable=True))
        batch.add_column(sa.Column('item_title', sa.String(length=200), nullable=True))
        batch.add_column(sa.Column('performance', sa.Boolean(), server_default=sa.false(),
                                   nullable=False))
        batch.add_column(sa.Column('requeued', sa.Boolean(), server_default=sa.false(),
                                   nullable=False))
    # Every request so far was about a released hand grade: its submission and assignment.
    op.execute("UPDATE regrade_requests SET "
               "assignment_id = (SELECT g.assignment_id FROM manual_grades g "
               "WHERE g.id = regrade_requests.grade_id), "
               "submission_id = (SELECT g.submission_id FROM manual_grades g "
               "WHERE g.id = regrade_requests.grade_id), "
               "item_title = (SELECT i.title FROM rubric_items i "
               "WHERE i.id = regrade_requests.item_id)")
    with op.batch_alter_table('regrade_requests') as batch:
        batch.alter_column('assignment_id', existing_type=sa.Integer(), nullable=False)
        batch.alter_column('submission_id', existing_type=sa.Integer(), nullable=False)
        batch.alter_column('grade_id', existing_type=sa.Integer(), nullable=True)
        batch.create_foreign_key('fk_regrade_requests_assignment_id', 'assignments',
                                 ['assignment_id'], ['id'], ondelete='CASCADE')
        batch.create_foreign_key('fk_regrade_requests_submission_id', 'submissions',
                                 ['submission_id'], ['id'], ondelete='CASCADE')
        batch.create_index('ix_regrade_requests_assignment_id', ['assignment_id'])
        batch.create_index('ix_regrade_requests_submission_id', ['submission_id'])


def downgrade() -> None:
    op.execute("DELETE FROM regrade_requests WHERE grade_id IS NULL")
    with op.batch_alter_table('regrade_requests') as batch:
        batch.drop_index('ix_regrade_requests_submission_id')
        batch.drop_index('ix_regrade_requests_assignment_id')
        batch.drop_constraint('fk_regrade_requests_submission_id', type_='foreignkey')
        batch.drop_constraint('fk_regrade_requests_assignment_id', type_='foreignkey')
        batch.alter_column('grade_id', existing_type=sa.Integer(), nullable=False)
        batch.drop_column('requeued')
        batch.drop_column('performance')
        batch.drop_column('item_title')
        batch.drop_column('submission_id')
        batch.drop_column('assignment_id')
