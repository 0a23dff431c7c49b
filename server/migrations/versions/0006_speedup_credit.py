"""what the credit policy made of each stored speedup, and an instructor's review of it

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-23 08:00:00
"""
from alembic import op
import sqlalchemy as sa


revision = '0006'
down_revision = '0005'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('grade_reports', schema=None) as batch_op:
        batch_op.add_column(sa.Column('credit_status', sa.String(length=16), nullable=True))
        batch_op.add_column(sa.Column('credited_speedup', sa.Float(), nullable=True))
        batch_op.add_column(sa.Column('review', sa.String(length=16), nullable=True))
        batch_op.create_index('ix_grade_reports_credit_status', ['credit_status'], unique=False)
    # Reports stored before the policy: a speedup its cores can explain keeps ranking as it was;
    # one above cores × 1.15 on a CPU or MPI package (a closed form, or serial code vectorised
    # so that it skips the parallel work) is held, so it leaves the ranking until a regrade
    # measures its parallelism or an instructor grants it.
    reports = sa.table("grade_reports", sa.column("id", sa.Integer),
                       sa.column("submission_id", sa.Integer),
                       sa.column("speedup_median", sa.Float),
                       sa.column("credit_status", sa.String), sa.column("credited_speedup", sa.Float))
    subs = sa.table("submissions", sa.column("id", sa.Integer), sa.column("version_id", sa.Integer))
    versions = sa.table("assignment_versions", sa.column("id", sa.Integer),
                        sa.column("manifest", sa.JSON))
    bind = op.get_bind()
    rows = bind.execute(
        sa.select(reports.c.id, reports.c.speedup_median, versions.c.manifest)
        .join(subs, subs.c.id == reports.c.submission_id)
        .join(versions, versions.c.id == subs.c.version_id)
        .where(reports.c.speedup_median.is_not(None))).all()
    for report_id, speedup, manifest in rows:
        resources = (manifest or {}).get("resources", {})
        held = resources.get("kind") != "gpu" and speedup > int(resources.get("cores", 1)) * 1.15
        bind.execute(reports.update().where(reports.c.id == report_id).values(
            credit_status="held" if held else None, credited_speedup=None if held else speedup))


def downgrade() -> None:
    with op.batch_alter_table('grade_reports', schema=None) as batch_op:
        batch_op.drop_index('ix_grade_reports_credit_status')
        batch_op.drop_column('review')
        batch_op.drop_column('credited_speedup')
        batch_op.drop_column('credit_status')
