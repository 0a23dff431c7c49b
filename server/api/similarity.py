"""Similarity runs over an assignment's submissions (the course's staff)."""

from __future__ import annotations

from fastapi import APIRouter, status
from sqlalchemy.orm import Session

from server.api import RowId
from server.db import committing
from server.deps import CourseStaffDep, SessionDep
from server.models import SimilarityRun
from server.schemas import ErrorPublic, SimilarityCreate, SimilarityRunPublic, SimilarPairPublic
from server.services.intake import similarity as similarity_service
from server.services.packages import assignments as assignment_service

router = APIRouter(prefix="/api/courses", tags=["similarity"],
                   responses={401: {"model": ErrorPublic}, 403: {"model": ErrorPublic},
                              404: {"model": ErrorPublic}, 422: {"model": ErrorPublic}})


def run_public(session: Session, run: SimilarityRun, *, with_pairs: bool) -> SimilarityRunPublic:
    result = run.result or {}
    out = SimilarityRunPublic(id=run.id, basis=run.basis, threshold=run.threshold,
                              status=run.status, submissions=len(run.submission_ids),
                              created_at=run.created_at, finished_at=run.finished_at,
                              error=run.error, compared=result.get("compared"),
                              seconds=result.get("seconds"), tool=result.get("tool"))
    if with_pairs and run.result is not None:
        found = similarity_service.pairs(run)
        who = similarity_service.owners(session=session, found=found)
        out.pairs = [SimilarPairPublic(**p.model_dump(), student_a=who[p.a].email,
                                       student_b=who[p.b].email) for p in found]
    return out


@router.post("/{course}/assignments/{slug}/similarity", response_model=SimilarityRunPublic,
             status_code=status.HTTP_202_ACCEPTED)
def start(slug: str, body: SimilarityCreate, access: CourseStaffDep,
          session: SessionDep) -> SimilarityRunPublic:
    """Compare every student's latest (or best) submission on a runner; the starter, baseline
    and reference code are boilerplate."""
    with committing(session):
        a = assignment_service.get(session=session, course=access.course, slug=slug)
        run = similarity_service.start(session=session, actor=access.user, assignment=a,
                                       role=access.role, basis=body.basis,
                                       threshold=body.threshold)
        return run_public(session, run, with_pairs=False)


@router.get("/{course}/assignments/{slug}/similarity", response_model=list[SimilarityRunPublic])
def runs(slug: str, access: CourseStaffDep, session: SessionDep) -> list[SimilarityRunPublic]:
    """The assignment's similarity runs, newest first."""
    a = assignment_service.get(session=session, course=access.course, slug=slug)
    return [run_public(session, r, with_pairs=False)
            for r in similarity_service.of_assignment(session=session, assignment=a)]


@router.get("/{course}/assignments/{slug}/similarity/{run_id}",
            response_model=SimilarityRunPublic)
def run(slug: str, run_id: RowId, access: CourseStaffDep,
        session: SessionDep) -> SimilarityRunPublic:
    """One run and, once done, its pairs (most similar first) with the matching lines."""
    a = assignment_service.get(session=session, course=access.course, slug=slug)
    return run_public(session, similarity_service.get(session=session, assignment=a,
                                                      run_id=run_id), with_pairs=True)
