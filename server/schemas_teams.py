"""Teams' inputs and outputs (server/api/teams.py)."""

from __future__ import annotations

from pydantic import Field

from server.schemas import Input, Paragraphs, Public, UtcDatetime


class TeamCreate(Input):
    name: str = Field(min_length=1, max_length=80, description="The team's name on the board")


class TeamJoin(Input):
    code: str = Field(min_length=1, max_length=32, description="The join code a member gave you")


class TeamPlace(Input):
    email: str = Field(min_length=3, max_length=320, description="The student placed")
    team: str = Field(min_length=1, max_length=80, description="The team's name (made if new)")


class MemberPublic(Public):
    name: str
    email: str
    joined_at: UtcDatetime


class TeamPublic(Public):
    id: int
    name: str
    join_code: str = Field(description="Give it to a classmate to join (members and staff)")
    members: list[MemberPublic]
    size: tuple[int, int] = Field(description="The assignment's team sizes: (min, max)")
    locked: bool = Field(description="Membership no longer changes (the lock date passed)")
    deadline: UtcDatetime | None = Field(default=None, description="The team's own extension "
                                         "(null: the assignment's deadline holds)")


class TeamsImport(Paragraphs):
    MULTILINE = frozenset({"csv"})
    csv: str = Field(min_length=1, max_length=1_000_000, description="A CSV with the columns "
                     "email and team: each student placed in the team named (made if new)")


class TeamsCopy(Input):
    source: str = Field(min_length=1, max_length=100, description="The slug of another "
                        "assignment of the course whose teams are made again here")
