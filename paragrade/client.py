"""Student and instructor commands that talk to a paragrade server over HTTP."""

from __future__ import annotations

import getpass
import json
import os
import time
from pathlib import Path
from typing import Annotated, Any

import httpx
import typer
from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict
from rich.console import Console
from rich.table import Table

from runners.protocol import GradeReport

console = Console()
err = Console(stderr=True)


class ClientSettings(BaseSettings):
    """Where the CLI keeps its login (PARAGRADE_CLIENT_*)."""

    model_config = SettingsConfigDict(env_prefix="PARAGRADE_CLIENT_", extra="ignore")

    config: Path = Field(default=Path.home() / ".config" / "paragrade" / "client.json")


def _fail(message: str) -> None:
    err.print(f"[red]error:[/] {message}", highlight=False)
    raise typer.Exit(2)


def _login_state() -> dict[str, str]:
    path = ClientSettings().config
    if not path.is_file():
        _fail("not logged in: run `paragrade login URL` first")
    data: dict[str, str] = json.loads(path.read_text())
    return data


def _client() -> httpx.Client:
    state = _login_state()
    return httpx.Client(base_url=state["url"], timeout=60,
                        headers={"Authorization": f"Bearer {state['token']}"})


def _check(r: httpx.Response) -> Any:
    if r.status_code >= 400:
        try:
            detail = r.json().get("detail", r.text)
            problems = r.json().get("problems") or []
        except ValueError:
            detail, problems = r.text, []
        for p in problems:
            err.print(f"  {p.get('file')}: {p.get('key')}: {p.get('reason')}", highlight=False)
        _fail(f"{detail} (HTTP {r.status_code})")
    return r.json() if r.content and r.headers.get("content-type", "").startswith(
        "application/json") else r.content


def _split(ref: str) -> tuple[str, str]:
    if ref.count("/") != 1:
        _fail(f"name the assignment as course/slug, e.g. treasure-hunt/t1-multiprocessing "
              f"(got {ref!r})")
    course, slug = ref.split("/")
    return course, slug


def register(url: str, join_code: Annotated[str, typer.Option(help="the course's join code")],
             email: Annotated[str | None, typer.Option()] = None,
             name: Annotated[str | None, typer.Option()] = None,
             alias: Annotated[str | None, typer.Option(help="name shown on leaderboards")] = None,
             password: Annotated[str | None, typer.Option()] = None) -> None:
    """Create a student account with a course's join code, then log in."""
    email = email or input("email: ")
    name = name or input("name: ")
    password = password or getpass.getpass("password (≥ 8 characters): ")
    body = {"email": email, "name": name, "password": password, "join_code": join_code,
            "alias": alias}
    try:
        r = httpx.post(f"{url.rstrip('/')}/api/auth/register", json=body, timeout=30)
    except httpx.HTTPError as exc:
        _fail(f"cannot reach {url}: {exc}")
        return
    _check(r)
    console.print(f"account {email} created")
    login(url, email=email, password=password)


def login(url: str, email: Annotated[str | None, typer.Option()] = None,
          password: Annotated[str | None, typer.Option()] = None) -> None:
    """Log in to a server; the token is kept in ~/.config/paragrade/client.json (mode 600)."""
    email = email or input("email: ")
    password = password or getpass.getpass("password: ")
    try:
        r = httpx.post(f"{url.rstrip('/')}/api/auth/token",
                       json={"email": email, "password": password}, timeout=30)
    except httpx.HTTPError as exc:
        _fail(f"cannot reach {url}: {exc}")
        return
    token = _check(r)["token"]
    path = ClientSettings().config
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        json.dump({"url": url.rstrip("/"), "token": token}, fh)
    console.print(f"logged in to {url} as {email}")


def logout() -> None:
    """Revoke this login's token on the server and forget it here."""
    path = ClientSettings().config
    if not path.is_file():
        console.print("not logged in")
        return
    try:
        with _client() as c:
            r = c.delete("/api/auth/token")
        if r.status_code not in (204, 401):  # 401: already expired or revoked
            _check(r)
    except httpx.HTTPError as exc:
        _fail(f"cannot reach the server to revoke the token (kept in {path}): {exc}")
    path.unlink()
    console.print("logged out (the token is revoked)")


def submit(assignment: Annotated[str, typer.Argument(help="course/slug")],
           files: Annotated[list[Path], typer.Argument(help="solution file(s)")],
           wait: Annotated[bool, typer.Option(help="wait for the grade")] = True,
           spend_late_days: Annotated[bool, typer.Option(
               help="after the deadline, spend the late days the upload needs (the server "
                    "says how many without it)")] = False) -> None:
    """Upload a solution and (unless --no-wait) follow it until it is graded."""
    course, slug = _split(assignment)
    with _client() as c:
        sub = _check(c.post(f"/api/courses/{course}/assignments/{slug}/submissions",
                            files=_uploads(files),
                            params={"spend_late_days": "true"} if spend_late_days else None))
        console.print(f"submission {sub['id']} {sub['status']}")
        if not wait:
            return
        with console.status("queued") as status:
            while sub["status"] in ("queued", "running"):
                time.sleep(1)
                sub = _check(c.get(f"/api/submissions/{sub['id']}"))
                pos, why = sub.get("queue_position"), sub.get("waiting_for")
                status.update(f"{sub['status']}" + (f" (position {pos})" if pos else "")
                              + (f": {why}" if why else ""))
    _show(sub)


def try_(assignment: Annotated[str, typer.Argument(help="course/slug")],
         files: Annotated[list[Path], typer.Argument(help="solution file(s)")],
         time_it: Annotated[bool, typer.Option("--time", help="one short timing as well")] = False,
         profile: Annotated[bool, typer.Option(help="where the time of one call went")] = False,
         wait: Annotated[bool, typer.Option(help="wait for the report")] = True) -> None:
    """Run a file on the grading hardware without it counting: the public tests only (with
    --time one short timing, with --profile where the time of one call went). Never graded,
    never on the board; it has its own limit."""
    course, slug = _split(assignment)
    with _client() as c:
        run = _check(c.post(f"/api/courses/{course}/assignments/{slug}/practice",
                            files=_uploads(files),
                            data={"timed": "true" if time_it else "false",
                                  "profile": "true" if profile else "false"}))
        console.print(f"practice run {run['id']} {run['status']} (not graded)")
        if not wait:
            return
        with console.status("queued behind graded work") as status:
            while run["status"] in ("queued", "running"):
                time.sleep(1)
                run = _check(c.get(f"/api/practice/{run['id']}"))
                status.update(run["status"])
    if not _rendered(run):
        console.print(f"practice run {run['id']}: {run['status']}"
                      + (f": {run['error']}" if run.get("error") else ""))


def _uploads(files: list[Path]) -> list[tuple[str, tuple[str, bytes]]]:
    """The files as a multipart upload; a missing one named."""
    for f in files:
        if not f.is_file():
            _fail(f"{f}: no such file")
    return [("files", (f.name, f.read_bytes())) for f in files]


def _rendered(answer: dict[str, Any]) -> bool:
    """Print the answer's report, if it has one (a submission's, a practice run's)."""
    if not answer.get("report"):
        return False
    from runners.grading.render import render

    render(GradeReport.model_validate(answer["report"]), console)
    return True


def _show(sub: dict[str, Any]) -> None:
    if not _rendered(sub):
        where = f" on the {sub['queue']} queue" if sub.get("queue") else ""
        why = f" ({sub['waiting_for']})" if sub.get("waiting_for") else ""
        console.print(f"submission {sub['id']}: {sub['status']}{where}"
                      f"{' ' + sub['verdict'] if sub.get('verdict') else ''}{why}")


def status(submission: Annotated[int | None, typer.Argument(help="a submission id")] = None) -> None:
    """Your submissions, or one submission's full report."""
    with _client() as c:
        if submission is not None:
            _show(_check(c.get(f"/api/submissions/{submission}")))
            return
        rows = _check(c.get("/api/submissions"))
    table = Table("id", "assignment", "queue", "status", "verdict", "score", "late", "submitted")
    for s in rows:
        table.add_row(str(s["id"]), s["assignment"], s.get("queue") or "", s["status"],
                      s["verdict"] or "",
                      "" if s["score"] is None else f"{s['score']:g}", "late" if s["late"] else "",
                      s["created_at"][:19])
    console.print(table)


def cancel(submission: Annotated[int, typer.Argument(help="a submission id")]) -> None:
    """Stop a queued or running submission (it does not count against your quota)."""
    with _client() as c:
        sub = _check(c.post(f"/api/submissions/{submission}/cancel"))
    console.print(f"submission {sub['id']}: {sub['status']}")


def leaderboard(assignment: Annotated[str, typer.Argument(help="course/slug")]) -> None:
    """The assignment's leaderboard (ties: overlapping 95 % CIs; held or refused speedups are
    listed unranked, with why)."""
    course, slug = _split(assignment)
    with _client() as c:
        rows = _check(c.get(f"/api/courses/{course}/assignments/{slug}/leaderboard"))
    table = Table("rank", "student", "speedup", "95 % CI", "score", title=assignment)
    for e in rows:
        ci = f"{e['ci_low']:.2f}–{e['ci_high']:.2f}" if e["ci_low"] is not None else ""
        speedup = "" if e["speedup"] is None else f"{e['speedup']:.2f}×"
        if e.get("mark"):
            speedup += f" ({e['mark']})"
        rank = "–" if e["rank"] is None else f"{e['rank']}{'=' if e['tied'] else ''}"
        table.add_row(rank, e["alias"] + (" (you)" if e["you"] else ""), speedup, ci,
                      f"{e['score']:g}")
    console.print(table)


def add_commands(app: typer.Typer) -> None:
    for fn in (register, login, logout, submit, status, cancel, leaderboard):
        app.command()(fn)
    app.command("try")(try_)
