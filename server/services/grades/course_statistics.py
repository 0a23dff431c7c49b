"""How a class is doing across a course's assignments: each one's completion and median best
score side by side, and the students to watch (services/grades/statistics.py does one assignment).

Every figure is an SQL aggregate per (assignment, student); what reaches Python is one row per
pair, never one per submission."""

from __future__ import annotations

import statistics
from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import case, func, select
from sqlalchemy.orm import Session

from server.models import Assignment, Enrollment, GradeReportRow, Submission, User, aware
from server.services.people import teams

WATCH_DEADLINE = timedelta(hours=48)
"""An open assignment whose deadline is this close, not yet started: the student is watched."""

FAILED_IN_A_ROW = 5
"""Graded attempts in a row without a pass (and none before): a student stuck on an assignment."""

FALLING_BY = 0.25
"""A student's latest assignment's best score this far (a share of the maximum) below the mean
of their earlier ones: falling scores."""


@dataclass(frozen=True)
class AssignmentLine:
    slug: str
    title: str
    deadline: datetime | None
    enrolled: int
    submitted: int
    passed: int
    median_best: float | None
    max_score: float | None
    teams: int | None = None
    """Team work: how many teams it has (None: individual work)."""


@dataclass(frozen=True)
class Watch:
    name: str
    alias: str
    email: str
    why: str


@dataclass(frozen=True)
class CourseStats:
    assignments: list[AssignmentLine]
    watchlist: list[Watch]


def of_course(*, session: Session, course_id: int, at: datetime) -> CourseStats:
    """Each assignment's completion and median best score (its teams' count on team work), and
    the students to watch: in no team of open team work, not started on an assignment due
    within 48 h, stuck (5 graded attempts, none passed), or falling (their latest assignment a
    quarter of the maximum below their earlier ones). A team's submission is each member's."""
    s, r = Submission, GradeReportRow
    assignments = list(session.scalars(select(Assignment).where(
        Assignment.course_id == course_id).order_by(Assignment.deadline.is_(None),
                                                    Assignment.deadline, Assignment.slug)))
    people = {uid: (name, alias or "", email) for uid, name, alias, email in session.execute(
        select(User.id, User.name, Enrollment.alias, User.email).join(
            Enrollment, Enrollment.user_id == User.id).where(
            Enrollment.course_id == course_id, Enrollment.role == "student"))}
    last_pass = func.max(case((s.verdict == "passed", s.id)))
    pairs = teams.sharers()  # a team's submission is each of its members' (people/teams.py)
    per = session.execute(
        select(s.assignment_id, pairs.c.uid, func.max(s.score), func.max(r.max_score), last_pass,
               func.count(case((s.status == "graded", s.id))))
        .join(pairs, pairs.c.sid == s.id)
        .outerjoin(r, r.submission_id == s.id)
        .where(s.assignment_id.in_([a.id for a in assignments]))
        .group_by(s.assignment_id, pairs.c.uid)).all()
    best: dict[int, dict[int, float | None]] = defaultdict(dict)
    tops: dict[int, float] = {}
    passed: dict[int, set[int]] = defaultdict(set)
    stuck: list[tuple[int, int]] = []
    for aid, uid, top_score, max_score, pass_id, graded in per:
        if uid not in people:
            continue
        best[aid][uid] = top_score
        if max_score:
            tops[aid] = max(tops.get(aid, 0.0), float(max_score))
        if pass_id is not None:
            passed[aid].add(uid)
        elif graded >= FAILED_IN_A_ROW:
            stuck.append((aid, uid))
    lines = [AssignmentLine(
        slug=a.slug, title=a.title, deadline=aware(a.deadline) if a.deadline else None,
        enrolled=len(people), submitted=len(best[a.id]), passed=len(passed[a.id]),
        median_best=statistics.median(v for v in best[a.id].values() if v is not None)
        if any(v is not None for v in best[a.id].values()) else None,
        max_score=tops.get(a.id), teams=len(teams.of_assignment(session=session, assignment=a))
        if teams.team_work(a) else None) for a in assignments]
    by_id = {a.id: a for a in assignments}
    watch = _teamless(session, assignments, people, at)
    for a in assignments:
        due = aware(a.deadline) if a.deadline else None
        if due is not None and at <= due <= at + WATCH_DEADLINE:
            for uid in sorted(set(people) - set(best[a.id]), key=lambda u: people[u][0]):
                hours = (due - at).total_seconds() / 3600
                watch.append(Watch(*people[uid][:2], people[uid][2],
                                   f"no submission to {a.title}, due in {hours:.0f} h"))
    for aid, uid in stuck:
        watch.append(Watch(*people[uid][:2], people[uid][2],
                           f"{FAILED_IN_A_ROW} or more graded attempts at {by_id[aid].title}, "
                           "none passed"))
    graded_order = [a for a in assignments if a.id in tops]
    for uid in people:
        shares = [(a, score / tops[a.id]) for a in graded_order
                  if (score := best[a.id].get(uid)) is not None]
        if len(shares) >= 2:
            earlier = statistics.fmean(v for _, v in shares[:-1])
            latest_a, latest = shares[-1]
            if earlier - latest >= FALLING_BY:
                watch.append(Watch(*people[uid][:2], people[uid][2],
                                   f"falling: {latest:.0%} of the points on {latest_a.title} "
                                   f"after {earlier:.0%} on average before"))
    return CourseStats(assignments=lines, watchlist=watch)


def _teamless(session: Session, assignments: list[Assignment],
              people: dict[int, tuple[str, str, str]], at: datetime) -> list[Watch]:
    """Students in no team of a team-work assignment whose deadline has not passed."""
    watch = []
    for a in assignments:
        if not teams.team_work(a) or (a.deadline is not None and aware(a.deadline) < at):
            continue
        inside = {m.user_id for t in teams.of_assignment(session=session, assignment=a)
                  for m in teams.members(t)}
        for uid in sorted(set(people) - inside, key=lambda u: people[u][0]):
            watch.append(Watch(*people[uid][:2], people[uid][2],
                               f"in no team for {a.title} (team work)"))
    return watch
