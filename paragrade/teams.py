"""`paragrade team …`: a student's team of an assignment (server/api/teams.py)."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from paragrade.client import _check, _client, _split, console

team_app = typer.Typer(help="Your team of a team-work assignment: create, join, show, leave.",
                       no_args_is_help=True)
Ref = Annotated[str, typer.Argument(help="course/slug")]


def _url(assignment: str) -> str:
    course, slug = _split(assignment)
    return f"/api/courses/{course}/assignments/{slug}/team"


def _print(team: dict[str, Any]) -> None:
    low, high = team["size"]
    console.print(f"team [bold]{team['name']}[/] ({len(team['members'])} of {low}–{high})"
                  f"{' · locked' if team['locked'] else ''}", highlight=False)
    for m in team["members"]:
        console.print(f"  {m['name']} <{m['email']}>", highlight=False)
    if not team["locked"]:
        console.print(f"join code: {team['join_code']} (give it to a classmate: "
                      f"paragrade team join COURSE/SLUG {team['join_code']})", highlight=False)


@team_app.command()
def create(assignment: Ref, name: Annotated[str, typer.Argument(help="the team's name")]) -> None:
    """Create a team with you in it."""
    with _client() as c:
        _print(_check(c.post(_url(assignment), json={"name": name})))


@team_app.command()
def join(assignment: Ref, code: Annotated[str, typer.Argument(help="the team's join code")]
         ) -> None:
    """Join the team whose join code a member gave you."""
    with _client() as c:
        _print(_check(c.post(_url(assignment) + "/join", json={"code": code})))


@team_app.command()
def show(assignment: Ref) -> None:
    """Your team and its members."""
    with _client() as c:
        _print(_check(c.get(_url(assignment))))


@team_app.command()
def leave(assignment: Ref) -> None:
    """Leave your team (what it handed in while you were in it stays yours)."""
    with _client() as c:
        _check(c.delete(_url(assignment)))
    console.print("you left the team")
