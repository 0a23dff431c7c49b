"""grading by a person: an assignment's rubric and manual points, each student's manual grade
(items applied, comments on lines), regrade requests; when hidden tests' messages are shown

Revision ID: 0022
Revises: 0021
Create Date: 2026-11-29 01:30:00
"""
from alembic import op
import sqlalchemy as sa


revision = '0022'
down_revision = '0021'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('assignments') as batch:
        batch.add_column(sa.Column('manual_points', sa.Float(), server_default='0',
                                   nullable=False))
        batch.add_column(sa.Column('manual_weight', sa.Float(), server_default='1',
                                   nullable=False))
        batch.add_column(sa.Column('manual_released_at', sa.DateTime(timezone=True),
                                   nullable=True))
        batch.add_column(sa.Column('regrade_limit', sa.Integer(), server_default='3',
                                   nullable=False))
        batch.add_column(sa.Column('hidden_tests_shown', sa.String(length=16), nullable=True))
        batch.add_column(sa.Column('manual_anonymous', sa.Boolean(), server_default=sa.false(),
                                   nullable=False))
    op.create_table(
        'rubric_items',
        sa.Column('id', sa.Integer(), nullable=False),
        sa.Column('assignment_id', sa.Integer(), nullable=False),
        sa.Column('group_name', sa.String(length=100), nullable=False),
        sa.Column('title', sa.String(length=200), nullable=False),
        sa.Column('description', sa.Text(), nullable=False),
        sa.Column('points', sa.Float(), nullable=False),
        sa.Column('position', sa.Integer(), nullable=False),
        sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(['assignment_id'], ['assignments.id'], ondelete='CASCADE'),
        sa.PrimaryKeyConstraint('id'),
    )
    op.create_index('ix_rubric_items_assignment_id', 'rubric_items', ['assignment_id'])
    op.create_table(
        'manual_grades',
        sa.Column('id', sa.Integer(), nullable=False),
        sa.Column('assignment_id', sa.Integer(), nullable=False),
        sa.Column('user_id', sa.Integer(), nullable=False),
        sa.Column('submission_id', sa.Integer(), nullable=False),
        sa.Column('status', sa.String(length=16), nullable=False),
        sa.Column('grader_id', sa.Integer(), nullable=True),
        sa.Column('locked_by', sa.Integer(), nullable=True),
        sa.Column('locked_until', sa.DateTime(timezone=True), nullable=True),
        sa.Column('updated_at', sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(['assignment_id'], ['assignments.id'], ondelete='CASCADE'),
        sa.ForeignKeyConstraint(['user_id'], ['users.id'], ondelete='CASCADE'),
        sa.ForeignKeyConstraint(['submission_id'], ['submissions.id'], ondelete='CASCADE'),
        sa.ForeignKeyConstraint(['grader_id'], ['users.id'], ondelete='SET NULL'),
        sa.ForeignKeyConstraint(['locked_by'], ['users.id'], ondelete='SET NULL'),
        sa.PrimaryKeyConstraint('id'),
        sa.UniqueConstraint('assignment_id', 'user_id'),
    )
    op.create_index('ix_manual_grades_assignment_id', 'manual_grades', ['assignment_id'])
    op.create_table(
        'manual_applied',
        sa.Column('grade_id', sa.Integer(), nullable=False),
        sa.Column('item_id', sa.Integer(), nullable=False),
        sa.ForeignKeyConstraint(['grade_id'], ['manual_grades.id'], ondelete='CASCADE'),
        sa.ForeignKeyConstraint(['item_id'], ['rubric_items.id'], ondelete='CASCADE'),
        sa.PrimaryKeyConstraint('grade_id', 'item_id'),
    )
    op.create_index('ix_manual_applied_item_id', 'manual_applied', ['item_id'])
    op.create_table(
        'manual_comments',
        sa.Column('id', sa.Integer(), nullable=False),
        sa.Column('grade_id', sa.Integer(), nullable=False),
        sa.Column('author_id', sa.Integer(), nullable=True),
        sa.Column('file', sa.String(length=300), nullable=True),
        sa.Column('line', sa.Integer(), nullable=True),
        sa.Column('body', sa.Text(), nullable=False),
        sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(['grade_id'], ['manual_grades.id'], ondelete='CASCADE'),
        sa.ForeignKeyConstraint(['author_id'], ['users.id'], ondelete='SET NULL'),
        sa.PrimaryKeyConstraint('id'),
    )
    op.create_index('ix_manual_comments_grade_id', 'manual_comments', ['grade_id'])
    op.create_table(
        'regrade_requests',
        sa.Column('id', sa.Integer(), nullable=False),
        sa.Column('grade_id', sa.Integer(), nullable=False),
        sa.Column('user_id', sa.Integer(), nullable=False),
        sa.Column('item_id', sa.Integer(), nullable=True),
        sa.Column('test_name', sa.String(length=300), nullable=True),
        sa.Column('reason', sa.Text(), nullable=False),
        sa.Column('status', sa.String(length=16), nullable=False),
        sa.Column('answer', sa.Text(), nullable=True),
        sa.Column('changed', sa.Boolean(), nullable=False),
        sa.Column('answered_by', sa.Integer(), nullable=True),
        sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
        sa.Column('answered_at', sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(['grade_id'], ['manual_grades.id'], ondelete='CASCADE'),
        sa.ForeignKeyConstraint(['user_id'], ['users.id'], ondelete='CASCADE'),
        sa.ForeignKeyConstraint(['item_id'], ['rubric_items.id'], ondelete='SET NULL'),
        sa.ForeignKeyConstraint(['answered_by'], ['users.id'], ondelete='SET NULL'),
        sa.PrimaryKeyConstraint('id'),
    )
    op.create_index('ix_regrade_requests_grade_id', 'regrade_requests', ['grade_id'])


def downgrade() -> None:
    op.drop_index('ix_regrade_requests_grade_id', table_name='regrade_requests')
    op.drop_table('regrade_requests')
    op.drop_index('ix_manual_comments_grade_id', table_name='manual_comments')
    op.drop_table('manual_comments')
    op.drop_index('ix_manual_applied_item_id', table_name='manual_applied')
    op.drop_table('manual_applied')
    op.drop_index('ix_manual_grades_assignment_id', table_name='manual_grades')
    op.drop_table('manual_grades')
    op.drop_index('ix_rubric_items_assignment_id', table_name='rubric_items')
    op.drop_table('rubric_items')
    with op.batch_alter_table('assignments') as batch:
        batch.drop_column('manual_anonymous')
        batch.drop_column('hidden_tests_shown')
        batch.drop_column('regrade_limit')
        batch.drop_column('manual_released_at')
        batch.drop_column('manual_weight')
        batch.drop_column('manual_points')
