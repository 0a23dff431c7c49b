"""The web layer's plumbing, shared by every page module and the LTI launch: templates and
their filters, the browser session's user, the CSRF check, rendering, form errors in plain
words, and the error and login-redirect pages."""

from __future__ import annotations

import secrets
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Annotated, Any
from urllib.parse import quote

from fastapi import Depends, Form, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, RedirectResponse, Response, StreamingResponse
from fastapi.templating import Jinja2Templates
from pydantic import ValidationError
from sqlalchemy.orm import Session

from server import security
from server.db import committing
from server.deps import SessionDep
from server.models import User
from server.services import MAX_ROW_ID
from server.services.intake import submissions as submission_service
from server.services.lti.linking import lms_only
from server.services.people import courses as course_service
from server.services.people import users as user_service
from server.services.records.errors import DomainError, Forbidden
from server.settings import ServerSettings
from server.web import live, report_text

HERE = Path(__file__).resolve().parent
templates = Jinja2Templates(directory=HERE / "templates")
templates.env.globals["lms_only"] = lms_only  # the page offers to link such an account


def form_number(text: str, *, high: int = MAX_ROW_ID) -> int | None:
    """A whole number from a form field or query string: ASCII digits only (not '²' or '٣',
    which str.isdigit takes), from 1 to `high` (a row id on both databases by default); None
    for anything else."""
    text = text.strip()
    if not (text.isascii() and text.isdigit()) or len(text) > len(str(high)):
        return None
    n = int(text)
    return n if 1 <= n <= high else None


def _seconds(s: float) -> str:
    """A duration as it reads: '4.2 s', '3.5 min', '2.1 h'."""
    return f"{s:.1f} s" if s < 90 else f"{s / 60:.1f} min" if s < 5400 else f"{s / 3600:.1f} h"


templates.env.filters["seconds"] = _seconds
templates.env.filters["breakable"] = report_text.breakable
templates.env.filters["test_rows"] = report_text.test_rows


class LoginRequired(Exception):
    """No (valid) browser session: the page sends the visitor to the login form."""

    def __init__(self, next_url: str) -> None:
        self.next_url = next_url


def session_user(request: Request, session: Session) -> User | None:
    """The user of the browser session's token (None: logged out, or the token ended)."""
    raw = request.session.get("token")
    return user_service.user_for_token(session=session, raw=str(raw)) if raw else None


def page_user(request: Request, session: SessionDep) -> User:
    user = session_user(request, session)
    if user is None:
        raise LoginRequired(request.url.path)
    return user


PageUser = Annotated[User, Depends(page_user)]


def _check_csrf(request: Request, csrf_token: Annotated[str, Form()] = "") -> None:
    expected = str(request.session.get("csrf", ""))
    if not expected or not security.same_secret(csrf_token, expected):
        raise Forbidden("this form is stale or forged (missing CSRF token): reload the page")


Csrf = Depends(_check_csrf)


def render(request: Request, template: str, status_code: int = 200, **context: Any
           ) -> HTMLResponse:
    context.setdefault("user", None)
    return templates.TemplateResponse(request, template, {"csrf": request.session.get("csrf", ""),
                                                          **context}, status_code=status_code)


# Plain words for a pattern a field failed (pydantic would print the regular expression).
PATTERN_HINTS = {"alias": "use letters, digits, spaces, '.', '_' or '-'",
                 "slug": "use lowercase letters, digits and '-', starting with a letter or digit"}


def reasons(exc: ValidationError | RequestValidationError) -> str:
    """A validation error as one line a person reads (the API's 422 says it the same way)."""
    parts = []
    for e in exc.errors():
        field = ".".join(str(x) for x in e["loc"] if x != "body")
        msg = e["msg"]
        if e.get("type") == "string_pattern_mismatch":
            msg = PATTERN_HINTS.get(str(e["loc"][-1]), "contains characters that are not allowed")
        parts.append(f"{field}: {msg}")
    return "; ".join(parts)


def start_session(request: Request, session: SessionDep, settings: ServerSettings,
                   user: User) -> None:
    raw = user_service.issue_token(session=session, user=user, name="browser",
                                   ttl=timedelta(days=settings.token_ttl_days))
    # A fresh CSRF token with the login: one a visitor held before it is worth nothing after.
    request.session.update(token=raw, csrf=secrets.token_urlsafe(32))


def anonymous_csrf(request: Request) -> None:
    """A CSRF token for a visitor not yet logged in: the login and register forms carry it, so a
    page elsewhere cannot log a browser into an account of its choosing (login CSRF)."""
    if not request.session.get("csrf"):
        request.session["csrf"] = secrets.token_urlsafe(32)


def safe_next(url: str) -> str:
    """A local path only: browsers read a backslash as a slash, so "/\\host" leaves the site."""
    return url if url.startswith("/") and not url.startswith("//") and "\\" not in url else "/"


def act_on_submission(submission_id: int, session: SessionDep, user: User,
                      action: Callable[..., object]) -> Response:
    """Run a submission service action (cancel, regrade) with the user's role, then show it."""
    sub = submission_service.get_visible(session=session, user=user, submission_id=submission_id)
    with committing(session):
        action(session=session, actor=user, submission=sub,
               role=course_service.role(session=session, user=user, course=sub.assignment.course))
    return RedirectResponse(f"/s/{submission_id}", status_code=303)


def login_redirect(request: Request, exc: LoginRequired) -> Response:
    return RedirectResponse(f"/login?next={quote(exc.next_url)}", status_code=303)


def error_page(request: Request, exc: DomainError) -> HTMLResponse:
    """A refused page request, as a page (the API answers JSON), with the reader's own header
    (their name, log out) where they are logged in."""
    with request.app.state.sessions() as session:
        user = session_user(request, session)
    return render(request, "error.html", status_code=exc.status, error=exc.message,
                  status=exc.status, user=user)


def event_stream(request: Request, allowed: Callable[[Session, User], int],
                 read: Callable[[Session, int], Any], *, every_s: float = 1.0,
                 shared: str | None = None) -> StreamingResponse:
    """A page's event stream: one event each time `read(session, key)` changes, for a reader
    `allowed` lets in (it returns the key: a submission's, an assignment's, a course's id).
    Access is checked in a session of its own, closed before streaming begins (a request's
    session lives until its response ends: one per open stream would hold a database
    connection for as long as the browser watches), and each read opens its own; `shared`: the
    readers of one key share one poll (server/web/live.py)."""
    sessions = request.app.state.sessions
    with sessions() as session:
        key = allowed(session, page_user(request, session))

    def poll() -> Any:
        with sessions() as s:
            return read(s, key)

    polls = None if shared is None else (request.app.state.polls, (shared, key))
    return StreamingResponse(live.events(poll, every_s, shared=polls),
                             media_type="text/event-stream", headers={"Cache-Control": "no-store"})
