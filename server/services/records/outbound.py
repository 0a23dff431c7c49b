"""The one HTTP client for requests the server makes on someone's behalf (an LMS's key set,
token and score endpoints; any later webhook).

Whoever registers the address (an instructor) is not whoever triggers the request (any visitor
who starts an LTI launch), so an address is never trusted as given:

- https only outside development;
- every address the host name resolves to is checked, and the connection goes to the address
  that was checked (a DNS answer that changes between the check and the connect, rebinding,
  reaches nothing new); loopback, private, link-local, multicast and reserved addresses are
  refused unless the platform's own setting allows them (a test LMS on this machine);
- one time budget for the whole exchange (connect, TLS, every read: a server that trickles a
  byte at a time is cut off at the budget, not at a per-read timeout) and a cap on the answer;
- no redirect is followed (a 3xx is a failure), no proxy from the environment is used;
- a failure is an `OutboundFailed` whose message is fixed and says which request failed, never
  what the far side answered: that body may be an internal page. The details go to the log.

It is blocking (pylti1p3 is): call it from a worker thread, never on the event loop.
"""

from __future__ import annotations

import ipaddress
import logging
import socket
import ssl
import time
import typing as t
from dataclasses import dataclass
from functools import cache
from urllib.parse import urlsplit

import certifi
import httpcore

log = logging.getLogger("paragrade.outbound")

BUDGET_S = 10.0
"""The whole exchange, first byte to last: an LMS answers its key set in well under a second."""
USER_AGENT = "paragrade (LTI tool)"
MAX_BYTES = 1 << 20
"""A key set, token or score answer is a few KiB; a MiB leaves room for a large key set."""


class OutboundFailed(Exception):
    """A request the server made on someone's behalf failed; `str()` is safe to show."""

    def __init__(self, public: str, detail: str = "", status: int | None = None) -> None:
        super().__init__(public)
        self.public, self.detail, self.status = public, detail, status


@dataclass(frozen=True)
class Policy:
    """What one outbound request may reach."""

    https_only: bool = True
    allow_private: bool = False
    budget_s: float = BUDGET_S
    max_bytes: int = MAX_BYTES


@dataclass(frozen=True)
class Answer:
    status: int
    headers: dict[str, str]
    body: bytes


def forbidden_address(ip: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
    """An address a request on someone's behalf must not reach without the platform's leave."""
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return (ip.is_loopback or ip.is_private or ip.is_link_local or ip.is_multicast
            or ip.is_reserved or ip.is_unspecified or not ip.is_global)


class _Stream(httpcore.NetworkStream):
    """A connection whose every read and write fits in what is left of the budget."""

    def __init__(self, inner: httpcore.NetworkStream, deadline: float) -> None:
        self.inner, self.deadline = inner, deadline

    def _left(self, timeout: float | None) -> float:
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise httpcore.ReadTimeout("the time budget is spent")
        return left if timeout is None else min(timeout, left)

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return self.inner.read(max_bytes, self._left(timeout))

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self.inner.write(buffer, self._left(timeout))

    def close(self) -> None:
        self.inner.close()

    def start_tls(self, ssl_context: ssl.SSLContext, server_hostname: str | None = None,
                  timeout: float | None = None) -> httpcore.NetworkStream:
        return _Stream(self.inner.start_tls(ssl_context, server_hostname, self._left(timeout)),
                       self.deadline)

    def get_extra_info(self, info: str) -> t.Any:
        return self.inner.get_extra_info(info)


class _Backend(httpcore.NetworkBackend):
    """Connects only to addresses the policy allows, to the very address it checked."""

    def __init__(self, policy: Policy, deadline: float) -> None:
        self.policy, self.deadline = policy, deadline
        self.inner = httpcore.SyncBackend()

    def connect_tcp(self, host: str, port: int, timeout: float | None = None,
                    local_address: str | None = None,
                    socket_options: t.Iterable[t.Any] | None = None) -> httpcore.NetworkStream:
        try:
            infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        except OSError as exc:
            raise httpcore.ConnectError(f"cannot resolve {host}: {exc}") from exc
        addresses = [ipaddress.ip_address(str(info[4][0]).split("%")[0]) for info in infos]
        if not addresses:
            raise httpcore.ConnectError(f"{host} has no address")
        refused = [str(a) for a in addresses if forbidden_address(a)]
        if refused and not self.policy.allow_private:
            raise _Refused(f"{host} resolves to {', '.join(refused)}: a loopback, private or "
                           "reserved address, and the platform does not allow those")
        failure: Exception = httpcore.ConnectError(f"{host}: no address answered")
        for address in dict.fromkeys(addresses):  # each checked one in turn (IPv6, then IPv4)
            left = self.deadline - time.monotonic()
            if left <= 0:
                raise httpcore.ConnectTimeout("the time budget is spent")
            try:
                stream = self.inner.connect_tcp(
                    str(address), port, timeout=left if timeout is None else min(timeout, left),
                    local_address=local_address, socket_options=socket_options)
            except httpcore.ConnectError as exc:
                failure = exc
                continue
            return _Stream(stream, self.deadline)
        raise failure

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds)


class _Refused(httpcore.ConnectError):
    """The address is not one this request may reach."""


@cache
def _tls() -> ssl.SSLContext:
    return ssl.create_default_context(cafile=certifi.where())


def request(method: str, url: str, *, policy: Policy, what: str,
            headers: t.Mapping[str, str] | None = None, content: bytes | None = None) -> Answer:
    """The answer to one request, whatever its status; OutboundFailed when there is none.

    `what` names the request in the fixed message a person may see ("the LMS's key set").
    """
    parts = urlsplit(url)
    if parts.scheme not in ("https", "http") or not parts.hostname:
        raise OutboundFailed(f"{what}: not an http(s) address")
    if policy.https_only and parts.scheme != "https":
        raise OutboundFailed(f"{what}: only https addresses are fetched")
    deadline = time.monotonic() + policy.budget_s
    timeout = {"connect": policy.budget_s, "read": policy.budget_s,
               "write": policy.budget_s, "pool": policy.budget_s}
    body = bytearray()
    try:
        with httpcore.ConnectionPool(ssl_context=_tls(), max_connections=1, retries=0,
                                     network_backend=_Backend(policy, deadline)) as pool, \
                pool.stream(method, url, headers=list({"User-Agent": USER_AGENT,
                                                       **(headers or {})}.items()),
                            content=content,
                            extensions={"timeout": timeout}) as response:
            for chunk in response.iter_stream():
                body += chunk
                if len(body) > policy.max_bytes:
                    raise _TooLarge(f"more than {policy.max_bytes} bytes")
                if time.monotonic() > deadline:
                    raise httpcore.ReadTimeout("the time budget is spent")
            status = response.status
            answer_headers = {k.decode("latin-1").lower(): v.decode("latin-1")
                              for k, v in response.headers}
    except _Refused as exc:
        log.warning("outbound %s %s refused: %s", method, url, exc)
        raise OutboundFailed(f"{what}: its address is not one the server may reach",
                             str(exc)) from None
    except (httpcore.TimeoutException, _TooLarge) as exc:
        log.warning("outbound %s %s cut off: %s", method, url, exc)
        raise OutboundFailed(f"{what}: no complete answer within {policy.budget_s:g} s and "
                             f"{policy.max_bytes} bytes", str(exc)) from None
    except (httpcore.ConnectError, httpcore.ProtocolError, httpcore.NetworkError,
            httpcore.UnsupportedProtocol, ssl.SSLError, OSError, ValueError) as exc:
        log.warning("outbound %s %s failed: %s: %s", method, url, type(exc).__name__, exc)
        raise OutboundFailed(f"{what}: could not be reached", str(exc)) from None
    if 300 <= status < 400:
        log.warning("outbound %s %s answered a redirect (%d), not followed", method, url, status)
        raise OutboundFailed(f"{what}: answered a redirect, which is not followed",
                             status=status)
    return Answer(status, answer_headers, bytes(body))


class _TooLarge(Exception):
    pass
