"""late days: each course's pool per student and the most one assignment may take, the days
covering each submission, and the days the staff gave back

Revision ID: 0029
Revises: 0028
Create Date: 2026-12-02 23:00:00
"""
from alembic import op
import sqlalchemy as sa


revision = '0029'
down_revision = '0028'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('courses') as batch:
        batch.add_column(sa.Column('late_days', sa.Integer(), server_default='0', nullable=False))
        batch.add_column(sa.Column('late_days_per_assignment', sa.Integer(), nullable=True))
    with op.batch_alter_table('submissions') as batch:
        batch.add_column(sa.Column('late_days', sa.Integer(), server_default='0', nullable=False))
    op.create_table(
        'late_day_grants',
        sa.Column('id', sa.Integer(), nullable=False),
        sa.Column('course_id', sa.Integer(), nullable=False),
        sa.Column('user_id', sa.Integer(), nullable=False),
        sa.Column('days', sa.Integer(), nullable=False),
        sa.Column('reason', sa.Text(), nullable=False),
        sa.Column('actor_id', sa.Integer(), nullable=True),
        sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(['actor_id'], ['users.id'], ondelete='SET NULL'),
        sa.ForeignKeyConstraint(['course_id'], ['courses.id'], ondelete='CASCADE'),
        sa.ForeignKeyConstraint(['user_id'], ['users.id'], ondelete='CASCADE'),
        sa.PrimaryKeyConstraint('id'),
    )
    op.create_index('ix_late_day_grants_course_id', 'late_day_grants', ['course_id'])
    op.create_index('ix_late_day_grants_user_id', 'late_day_grants', ['user_id'])


def downgrade() -> None:
    op.drop_table('late_day_grants')
    with op.batch_alter_table('submissions') as batch:
        batch.drop_column('late_days')
    with op.batch_alter_table('courses') as batch:
        batch.drop_column('late_days_per_assignment')
        batch.drop_column('late_days')
