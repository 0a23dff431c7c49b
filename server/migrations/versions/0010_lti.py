"""LTI 1.3: platforms (per course), identities, launch data, grade posts

Revision ID: 0010
Revises: 0009
Create Date: 2026-11-24 01:00:00
"""
from alembic import op
import sqlalchemy as sa


revision = '0010'
down_revision = '0009'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        'lti_platforms',
        sa.Column('id', sa.Integer(), primary_key=True),
        sa.Column('course_id', sa.Integer(), sa.ForeignKey('courses.id', ondelete='CASCADE'),
                  nullable=False),
        sa.Column('issuer', sa.String(500), nullable=False),
        sa.Column('client_id', sa.String(200), nullable=False),
        sa.Column('auth_login_url', sa.String(1000), nullable=False),
        sa.Column('auth_token_url', sa.String(1000), nullable=False),
        sa.Column('key_set_url', sa.String(1000), nullable=False),
        sa.Column('deployment_ids', sa.JSON(), nullable=False),
        sa.Column('tool_private_key', sa.Text(), nullable=False),
        sa.Column('tool_kid', sa.String(64), nullable=False),
        sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
        sa.UniqueConstraint('issuer', 'client_id'),
    )
    op.create_index('ix_lti_platforms_course_id', 'lti_platforms', ['course_id'])
    op.create_table(
        'lti_identities',
        sa.Column('id', sa.Integer(), primary_key=True),
        sa.Column('issuer', sa.String(500), nullable=False),
        sa.Column('key_set_url', sa.String(1000), nullable=False),
        sa.Column('subject', sa.String(255), nullable=False),
        sa.Column('user_id', sa.Integer(), sa.ForeignKey('users.id', ondelete='CASCADE'),
                  nullable=False),
        sa.UniqueConstraint('issuer', 'key_set_url', 'subject'),
    )
    op.create_index('ix_lti_identities_user_id', 'lti_identities', ['user_id'])
    op.create_table(
        'lti_launch_data',
        sa.Column('key', sa.String(300), primary_key=True),
        sa.Column('value', sa.JSON(), nullable=False),
        sa.Column('expires_at', sa.DateTime(timezone=True), nullable=False),
    )
    op.create_index('ix_lti_launch_data_expires_at', 'lti_launch_data', ['expires_at'])
    op.create_table(
        'lti_grade_posts',
        sa.Column('id', sa.Integer(), primary_key=True),
        sa.Column('platform_id', sa.Integer(),
                  sa.ForeignKey('lti_platforms.id', ondelete='CASCADE'), nullable=False),
        sa.Column('user_id', sa.Integer(), sa.ForeignKey('users.id', ondelete='CASCADE'),
                  nullable=False),
        sa.Column('assignment_id', sa.Integer(),
                  sa.ForeignKey('assignments.id', ondelete='CASCADE'), nullable=False),
        sa.Column('subject', sa.String(255), nullable=False),
        sa.Column('lineitem_url', sa.String(1000), nullable=False),
        sa.Column('scopes', sa.JSON(), nullable=False),
        sa.Column('score', sa.Float(), nullable=True),
        sa.Column('max_score', sa.Float(), nullable=False),
        sa.Column('state', sa.String(16), nullable=False),
        sa.Column('attempts', sa.Integer(), nullable=False),
        sa.Column('last_error', sa.Text(), nullable=True),
        sa.Column('next_at', sa.DateTime(timezone=True), nullable=True),
        sa.Column('sent_at', sa.DateTime(timezone=True), nullable=True),
        sa.UniqueConstraint('platform_id', 'user_id', 'assignment_id'),
    )
    op.create_index('ix_lti_grade_posts_platform_id', 'lti_grade_posts', ['platform_id'])
    op.create_index('ix_lti_grade_posts_assignment_id', 'lti_grade_posts', ['assignment_id'])
    op.create_index('ix_lti_grade_posts_state', 'lti_grade_posts', ['state'])


def downgrade() -> None:
    op.drop_table('lti_grade_posts')
    op.drop_table('lti_launch_data')
    op.drop_table('lti_identities')
    op.drop_table('lti_platforms')
