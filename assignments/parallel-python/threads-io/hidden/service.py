"""The record service (trusted side): every read waits LATENCY_S, then answers a record.

Records are keyed digests of a secret drawn when the grader starts, so a program can only learn
a record by asking for it: no cache, file or formula gives it away.
"""

import hashlib
import hmac
import os
import re

LATENCY_S = 0.010
_SECRET = os.urandom(32)
_KEY = re.compile(r"[a-z0-9-]{1,64}")


def record(key: str) -> str:
    """The record stored under `key` (16 hex digits)."""
    return hmac.new(_SECRET, key.encode(), hashlib.sha256).hexdigest()[:16]


def respond(request: str) -> str:
    if not _KEY.fullmatch(request):
        return "error: bad key"
    return record(request)
