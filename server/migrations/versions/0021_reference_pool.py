"""the reference's speedup pooled over a version's gradings: each grading's measurement of it
(one vote per student); a final run's turns keep the figure fixed at the run's start

Revision ID: 0021
Revises: 0020
Create Date: 2026-11-29 01:00:00
"""
from alembic import op
import sqlalchemy as sa


revision = '0021'
down_revision = '0020'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        'reference_figures',
        sa.Column('id', sa.Integer(), nullable=False),
        sa.Column('version_id', sa.Integer(), nullable=False),
        sa.Column('user_id', sa.Integer(), nullable=False),
        sa.Column('figure', sa.Float(), nullable=False),
        sa.Column('final', sa.Boolean(), nullable=False),
        sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(['version_id'], ['assignment_versions.id'], ondelete='CASCADE'),
        sa.ForeignKeyConstraint(['user_id'], ['users.id'], ondelete='CASCADE'),
        sa.PrimaryKeyConstraint('id'),
    )
    op.create_index('ix_reference_figures_version_id', 'reference_figures', ['version_id'])
    with op.batch_alter_table('final_turns') as batch:
        batch.add_column(sa.Column('reference_speedup', sa.Float(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('final_turns') as batch:
        batch.drop_column('reference_speedup')
    op.drop_index('ix_reference_figures_version_id', table_name='reference_figures')
    op.drop_table('reference_figures')
