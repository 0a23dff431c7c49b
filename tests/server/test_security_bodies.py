"""What anyone can send before logging in, and what an export or a package name can carry.

Each test failed on the code before: an unauthenticated 3 MB JSON body was parsed (and a large
multipart one read) before the 401; CSV cells starting with a byte-order mark and `=`, or with
`;=`, went out as formulas; a zip member whose name held a newline or an escape sequence was
accepted.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from server.main import JSON_BODY_BYTES
from server.services.packages import assignments as assignment_service
from server.services.records.errors import Invalid
from tests.server.conftest import World, zip_of

API_T1 = "/api/courses/th/assignments/t1-multiprocessing"


def test_an_unauthenticated_body_is_capped_before_it_is_read(world: World) -> None:
    big = b'{"email": "' + b"a" * (3 << 20) + b'"}'
    r = world.client.post("/api/auth/token", content=big,
                          headers={"Content-Type": "application/json"})
    assert r.status_code == 413 and str(JSON_BODY_BYTES) in r.text
    # Sent in chunks with no Content-Length: counted as it arrives.
    def chunks() -> Iterator[bytes]:
        yield b'{"email": "'
        for _ in range(40):
            yield b"a" * 65536
        yield b'"}'

    r = world.client.post("/api/auth/token", content=chunks(),
                          headers={"Content-Type": "application/json"})
    assert r.status_code == 413, r.text
    # A multipart upload without credentials: refused at the cap, not read to its end.
    r = world.client.post(f"{API_T1}/submissions",
                          files=[("files", ("solution.py", b"x" * (3 << 20)))])
    assert r.status_code == 413, r.text
    # Within the caps, nothing changes: an upload at its own limit reaches its route.
    r = world.submit(world.ada, b"x" * (65 * 1024))
    assert r.status_code == 413 and "upload larger than" in r.text
    assert world.client.post("/api/auth/token", json={"email": "a@b.c", "password": "x" * 9}
                             ).status_code == 403


@pytest.mark.parametrize("name", ["hidden/test_a\n.py", "data/x\x1b[2J.txt", "starter/a\rb.py",
                                  "hidden/\u202etxt.py"])
def test_control_characters_in_package_file_names_are_refused(name: str) -> None:
    with pytest.raises(Invalid, match="control characters"):
        assignment_service.safe_members(zip_of({name: b"x = 1\n"}), max_total=1 << 20)
