"""The API's schemas for LTI 1.3: an LMS registered with a course, and the scores posted to it."""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, Field

from server.schemas import Input, UtcDatetime


class LtiPlatformCreate(Input):
    issuer: str = Field(min_length=1, max_length=500, description="The LMS's issuer (iss)")
    client_id: str = Field(min_length=1, max_length=200,
                           description="The client id the LMS gave this tool")
    auth_login_url: str = Field(max_length=1000, description="The LMS's OIDC authorization URL")
    auth_token_url: str = Field(max_length=1000, description="The LMS's OAuth2 token URL")
    key_set_url: str = Field(max_length=1000, description="The LMS's JWKS URL")
    deployment_ids: list[Annotated[str, Field(min_length=1, max_length=200)]] = Field(
        min_length=1, max_length=100)
    allow_private_network: bool = Field(
        default=False, description="Let the server fetch this LMS's keys, tokens and scores from "
                                   "loopback or private addresses (a test LMS on the same "
                                   "machine or network; outside development only where the "
                                   "operator allows it). Off: such addresses are refused")


class LtiPlatformPublic(BaseModel):
    id: int
    issuer: str
    client_id: str
    deployment_ids: list[str]
    allow_private_network: bool = Field(description="Whether this LMS's addresses may be "
                                                    "loopback or private")
    login_url: str = Field(description="Give the LMS this OIDC login initiation URL")
    launch_url: str = Field(description="… this redirect (launch) URL")
    jwks_url: str = Field(description="… and this public keyset URL")
    public_key: str = Field(description="The tool's public key for this LMS (PEM)")


class LtiGradePostPublic(BaseModel):
    student: str
    assignment: str
    score: float | None
    max_score: float
    state: str = Field(description="idle (nothing graded yet) | pending | sent")
    attempts: int = Field(description="Failed tries since the score last changed")
    last_error: str | None
    next_try: UtcDatetime | None
    sent_at: UtcDatetime | None
