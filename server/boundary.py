"""The rule for text that reaches the server outside a JSON body: the address (path parameters),
the query string and a form's fields hold no control character (runners/protocol/text.py: NUL,
which PostgreSQL text cannot store, ESC, BEL, bidirectional overrides …), checked before any
route, its authentication or the database sees them. JSON bodies are checked by their models
(server/schemas.py `Input`); a password field may hold anything but NUL (it is never shown)."""

from __future__ import annotations

from urllib.parse import parse_qsl

from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from runners.protocol import text

FORM = b"application/x-www-form-urlencoded"


PARAGRAPHS = frozenset({"answer", "body", "description", "reason"})
"""The pages' form fields that are text of several lines (their textareas): a browser sends a
line break there as CR LF; tabs pass too, every other control character is refused as
everywhere. A single-line field is refused a line break here and again by its schema."""


def _why(pairs: list[tuple[str, str]], what: str, paragraphs: bool = False) -> str | None:
    """Why one of these name/value pairs cannot be stored as text, or None (`paragraphs`: the
    fields named in PARAGRAPHS may hold line breaks)."""
    for name, value in pairs:
        if (why := text.problem(name, f"a {what} name")) is not None:
            return why
        if "password" in name.lower():
            if "\x00" in value:
                return f"the {what} {name} contains a NUL character"
        elif paragraphs and name in PARAGRAPHS:
            if (why := text.paragraphs_problem(value, f"the {what} {name}")) is not None:
                return why
        elif (why := text.problem(value, f"the {what} {name}")) is not None:
            return why
    return None


def _pairs(raw: bytes) -> list[tuple[str, str]]:
    return parse_qsl(raw.decode("utf-8", "replace"), keep_blank_values=True)


class ControlCharacters:
    """Refuses (422, naming what and which character) a request whose address, query string or
    form field holds a control character; other requests pass unchanged (a form's body is read
    here and handed on as it came; the body limit outside bounds what is read)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        why = text.problem(scope["path"], "the address") or _why(
            _pairs(scope.get("query_string", b"")), "query parameter")
        if why is None and dict(scope.get("headers", [])).get(
                b"content-type", b"").split(b";")[0].strip().lower() == FORM:
            chunks: list[bytes] = []
            while True:
                message = await receive()
                if message["type"] != "http.request":  # the client went away
                    return
                chunks.append(message.get("body", b""))
                if not message.get("more_body", False):
                    break
            body = b"".join(chunks)
            why = _why(_pairs(body), "form field", paragraphs=True)
            receive = _replay(body, receive)
        if why is not None:
            await JSONResponse({"detail": why}, status_code=422)(scope, receive, send)
            return
        await self.app(scope, receive, send)


def _replay(body: bytes, receive: Receive) -> Receive:
    """A receive that hands on the body already read, then whatever the client sends next."""
    sent = False

    async def replay() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replay
