"""Hostile input gets a clear 4xx and changes nothing (paths, 500s, CSV, headers, ids)."""

from __future__ import annotations

import csv
import io
import re
import struct
import zipfile
from pathlib import Path

import hypothesis
import pytest
from fastapi.testclient import TestClient
from hypothesis import strategies as st
from sqlalchemy import Engine, func, select

from server.db import session_factory
from server.models import Artifact, AssignmentVersion, Submission, User
from server.settings import REPO_ROOT
from tests.server.conftest import REFERENCE, World, zip_of
from tests.server.reports import store
from tests.server.test_pages import browser, csrf

T1 = "/c/th/t1-multiprocessing"
API_T1 = "/api/courses/th/assignments/t1-multiprocessing"
PACKAGE = REPO_ROOT / "assignments/treasure-hunt/t1-multiprocessing"


def counts(engine: Engine) -> tuple[int, ...]:
    with session_factory(engine)() as s:
        return tuple(int(s.scalar(select(func.count()).select_from(m)) or 0)
                     for m in (Submission, Artifact, AssignmentVersion))


def package_files(manifest: bytes | None = None) -> dict[str, bytes]:
    """The t1 package, manifest first (the member the broken zips below damage)."""
    files = {p.relative_to(PACKAGE).as_posix(): p.read_bytes() for p in sorted(PACKAGE.rglob("*"))
             if p.is_file() and "__pycache__" not in p.parts}
    toml = manifest if manifest is not None else files["assignment.toml"]
    return {"assignment.toml": toml, **{k: v for k, v in files.items() if k != "assignment.toml"}}


def zipped(files: dict[str, bytes], method: int = zipfile.ZIP_DEFLATED) -> bytes:
    return zip_of(files, method)


def _patch_headers(data: bytes, *, flag: int = 0, method: int | None = None) -> bytes:
    """Set a general-purpose flag bit and/or the method in every local and central header."""
    out = bytearray(data)
    for sig, flag_at in ((b"PK\x03\x04", 6), (b"PK\x01\x02", 8)):
        for m in re.finditer(re.escape(sig), bytes(out)):
            at = m.start() + flag_at
            (bits,) = struct.unpack_from("<H", out, at)
            struct.pack_into("<H", out, at, bits | flag)
            if method is not None:
                struct.pack_into("<H", out, at + 2, method)
    return bytes(out)


def _first_member_data(data: bytes | bytearray) -> int:
    name_len, extra_len = struct.unpack_from("<HH", data, 26)
    return 30 + int(name_len) + int(extra_len)


def broken_zips(files: dict[str, bytes]) -> dict[str, bytes]:
    """The same files, zipped four ways zipfile cannot read (each was a 500)."""
    stored = bytearray(zipped(files, zipfile.ZIP_STORED))
    stored[_first_member_data(stored)] ^= 0xFF  # content no longer matches its CRC-32
    deflated = bytearray(zipped(files))
    deflated[_first_member_data(deflated)] = 0xFF  # deflate block type 3: invalid stream
    good = zipped(files)
    return {"bad-crc": bytes(stored), "encrypted": _patch_headers(good, flag=0x1),
            "deflate64": _patch_headers(good, method=9), "corrupt-stream": bytes(deflated)}


BROKEN = ("bad-crc", "encrypted", "deflate64", "corrupt-stream")
REASON = {"bad-crc": "damaged", "encrypted": "encrypted", "deflate64": "compression method",
          "corrupt-stream": "damaged"}


# broken zips, as a submission and as a package, API and form -------------------------------------
@pytest.mark.parametrize("kind", BROKEN)
def test_a_broken_zip_submission_is_refused_and_stores_nothing(world: World, engine: Engine,
                                                               kind: str) -> None:
    data = broken_zips({"solution.py": REFERENCE})[kind]
    before = counts(engine)
    r = world.submit(world.ada, data, name="solution.zip")
    assert r.status_code == 422, r.text
    assert "solution.py" in r.json()["detail"] and REASON[kind] in r.json()["detail"]
    b = browser(world)
    r = b.post(f"{T1}/submit", data={"csrf_token": csrf(b.get(T1).text)},
               files={"files": ("solution.zip", data)})
    assert r.status_code == 422 and REASON[kind] in r.text
    assert counts(engine) == before
    assert world.submit(world.ada, REFERENCE).status_code == 201  # nothing else was harmed


@pytest.mark.parametrize("kind", BROKEN)
def test_a_broken_package_zip_is_refused_and_the_course_keeps_its_version(
        world: World, engine: Engine, kind: str) -> None:
    data = broken_zips(package_files())[kind]
    before = counts(engine)
    r = world.post(world.prof, "/api/courses/th/assignments/upload",
                   files={"package": ("t1.zip", data)})
    assert r.status_code == 422, r.text
    assert "assignment.toml" in r.json()["detail"] and REASON[kind] in r.json()["detail"]
    prof = browser(world, "prof@uni.edu", "prof-pass-4821")
    r = prof.post("/c/th/import", data={"csrf_token": csrf(prof.get("/c/th").text)},
                  files={"package": ("t1.zip", data)})
    assert r.status_code == 422 and REASON[kind] in r.text
    assert counts(engine) == before
    a = world.get(world.ada, API_T1).json()
    assert a["version"] == "1.1.0" and a["validation"] == "ready"


def test_a_deeply_nested_manifest_is_a_problem_not_a_crash(world: World, engine: Engine) -> None:
    before = counts(engine)
    for toml in (b"a = " + b"[" * 5000 + b"]" * 5000,
                 b"a = " + b"{b = " * 3000 + b"1" + b"}" * 3000):
        r = world.post(world.prof, "/api/courses/th/assignments/upload",
                       files={"package": ("t1.zip", zipped(package_files(toml),
                                                            zipfile.ZIP_STORED))})
        assert r.status_code == 422, r.text
        assert r.json()["problems"] == [{"file": "assignment.toml", "key": "",
                                         "reason": "nested too deeply to be a manifest"}]
    assert counts(engine) == before


@pytest.mark.parametrize("deadline", ["9999-12-31T23:59:59-12:00", "0001-01-01T00:00:00+14:00"])
def test_a_deadline_beyond_the_calendar_is_refused(world: World, deadline: str) -> None:
    assert world.client.patch(API_T1, json={"deadline": "2030-01-01T12:00:00+00:00"},
                              headers=world.prof).status_code == 200
    r = world.client.patch(API_T1, json={"deadline": deadline}, headers=world.prof)
    assert r.status_code == 422 and "out of range" in r.json()["detail"], r.text
    prof = browser(world, "prof@uni.edu", "prof-pass-4821")
    form = {"csrf_token": csrf(prof.get(f"{T1}/manage").text), "late_policy": "accept",
            "late_penalty": "0", "quota_count": "5", "quota_window_min": "60",
            "speedup_min": "1", "speedup_full": "1.7", "deadline": deadline}
    r = prof.post(f"{T1}/manage/policy", data=form)
    assert r.status_code == 422 and "out of range" in r.text
    assert world.get(world.ada, API_T1).json()["deadline"].startswith("2030-01-01T12:00:00")


@pytest.mark.parametrize(("key", "line", "code"), [
    ("title", b'title = "Treasure hunt 1\\u001b[31m"', "U+001B"),
    ("title", b'title = "\\u202e1 tnuh erusaerT"', "U+202E"),
    ("timing.note", b'note = "JIT\\u0007 not timed"', "U+0007"),
])
def test_a_manifest_text_with_a_control_character_is_refused(world: World, engine: Engine,
                                                             key: str, line: bytes,
                                                             code: str) -> None:
    """A package's title and timing note are shown to every student: the text rule
    (runners/protocol/text.py) holds for them as for names and aliases."""
    toml = package_files()["assignment.toml"]
    if key == "title":
        toml = re.sub(rb'(?m)^title = .*$', line.replace(b"\\", b"\\\\"), toml)
    else:
        toml = toml.replace(b"[timing]\n", b"[timing]\n" + line + b"\n")
    before = counts(engine)
    r = world.post(world.prof, "/api/courses/th/assignments/upload",
                   files={"package": ("t1.zip", zipped(package_files(toml)))})
    assert r.status_code == 422, r.text
    problems = r.json()["problems"]
    assert [p["key"] for p in problems] == [key] and code in problems[0]["reason"], problems
    assert counts(engine) == before


# file names at import, at upload, and a manifest stored before the rule --------------------------
@pytest.mark.parametrize("name", ["../../../../tmp/evil.py", "/tmp/evil.py", "sub\\\\evil.py",
                                  "evil\\u0000.py"])
def test_a_manifest_naming_an_unsafe_file_is_refused(world: World, engine: Engine,
                                                     name: str) -> None:
    toml = package_files()["assignment.toml"].replace(
        b"[entry]\n", f'[entry]\nallowed_files = ["{name}"]\n'.encode())
    assert b"allowed_files" in toml
    before = counts(engine)
    r = world.post(world.prof, "/api/courses/th/assignments/upload",
                   files={"package": ("t1.zip", zipped(package_files(toml)))})
    assert r.status_code == 422, r.text
    assert [p["key"] for p in r.json()["problems"]] == ["entry.allowed_files"]
    assert counts(engine) == before


@pytest.mark.parametrize(("key", "folder"), [("data", "../../../../etc"), ("data", "/etc"),
                                             ("reference", "../reference")])
def test_package_folders_stay_inside_the_package(world: World, key: str, folder: str) -> None:
    """The runner reads these folders and copies `data` into the sandbox."""
    toml = package_files()["assignment.toml"] + f'\n[files]\n{key} = "{folder}"\n'.encode()
    if b"[files]" in package_files()["assignment.toml"]:
        pytest.skip("the package already has a [files] table")
    r = world.post(world.prof, "/api/courses/th/assignments/upload",
                   files={"package": ("t1.zip", zipped(package_files(toml)))})
    assert r.status_code == 422, r.text
    assert {"file": "assignment.toml", "key": f"files.{key}"}.items() <= \
        r.json()["problems"][0].items()


def test_code_files_with_unsafe_names_are_refused_at_import(world: World) -> None:
    files = package_files() | {"reference/.sneaky.py": b"x = 1\n"}
    r = world.post(world.prof, "/api/courses/th/assignments/upload",
                   files={"package": ("t1.zip", zipped(files))})
    assert r.status_code == 422, r.text
    assert r.json()["problems"][0]["file"] == "reference/.sneaky.py"


@pytest.mark.parametrize(("name", "reason"), [
    ("/tmp/evil.py", "absolute path"), ("../evil.py", "'..'"),
    ("..\\evil.py", "backslashes"), ("a/../../evil.py", "'..'")])
def test_uploads_with_unsafe_names_say_what_is_wrong(world: World, engine: Engine, name: str,
                                                     reason: str) -> None:
    before = counts(engine)
    r = world.post(world.ada, f"{API_T1}/submissions",
                   files=[("files", ("solution.py", REFERENCE)), ("files", (name, b"x = 1\n"))])
    assert r.status_code == 422, r.text
    assert r.json()["detail"].startswith(f"{name!r} is not a file this assignment takes: ")
    assert reason in r.json()["detail"]
    r = world.post(world.ada, f"{API_T1}/submissions",
                   files={"files": ("s.zip", zipped({"solution.py": REFERENCE, "x\\y.py": b"1"}))})
    assert r.status_code == 422 and "unsafe path" in r.json()["detail"], r.text
    assert counts(engine) == before


def test_a_stored_manifest_with_an_unsafe_name_is_a_conflict(world: World,
                                                             engine: Engine) -> None:
    """A version imported before names were checked: refused uploads, never a 500."""
    with session_factory(engine)() as s:
        v = s.scalars(select(AssignmentVersion)).one()
        manifest = dict(v.manifest)
        manifest["entry"] = {**manifest["entry"], "allowed_files": ["../../../../tmp/evil.py"]}
        v.manifest = manifest
        s.commit()
    before = counts(engine)
    r = world.post(world.ada, f"{API_T1}/submissions",
                   files=[("files", ("solution.py", REFERENCE)),
                          ("files", ("../../../../tmp/evil.py", b"x = 1\n"))])
    assert r.status_code == 409 and "import it again" in r.json()["detail"], r.text
    assert counts(engine) == before


# a 5xx is counted --------------------------------------------------------------------------------
def _server_errors(c: TestClient) -> float:
    text = c.get("/metrics").text
    return sum(float(v) for v in re.findall(
        r'paragrade_http_requests_total\{[^}]*status="5\d\d"[^}]*\} (\S+)', text))


def test_a_crash_is_counted_in_metrics_and_answers_without_a_traceback(
        client: TestClient) -> None:
    def boom() -> None:
        raise RuntimeError("secret detail of the failure")

    client.app.add_api_route("/api/test-boom", boom)  # type: ignore[attr-defined]
    # From this machine: a development server answers /metrics to no one else.
    quiet = TestClient(client.app, raise_server_exceptions=False, client=("127.0.0.1", 50000))
    before = _server_errors(quiet)
    r = quiet.get("/api/test-boom")
    assert r.status_code == 500 and "secret detail" not in r.text
    assert r.headers["X-Frame-Options"] == "DENY"
    assert _server_errors(quiet) == before + 1
    assert 'route="/api/test-boom",status="500"' in quiet.get("/metrics").text


# CSV formula injection, headers, gradescope ids --------------------------------------------------
@pytest.mark.parametrize("name", ['=HYPERLINK("http://evil.example","x")', "+1+1", "-2+3",
                                  "@SUM(A1)", "\tstart", "\rstart",
                                  # prefixes spreadsheets skip before they evaluate
                                  "\ufeff=HYPERLINK(\"http://evil.example\")", ";=1+1", ",=1+1",
                                  " =1+1", "\u200b=1", "＝1+1", "\n=1", "\x1b[31m"])
def test_grades_csv_escapes_formulas(world: World, engine: Engine, name: str) -> None:
    with session_factory(engine)() as s:
        ada = s.scalars(select(User).where(User.email == "ada@uni.edu")).one()
        ada.name = name
        s.commit()
    r = world.get(world.prof, f"{API_T1}/grades.csv")
    assert r.status_code == 200
    rows = {row["email"]: row for row in csv.DictReader(io.StringIO(r.text))}
    assert rows["ada@uni.edu"]["name"] == "'" + name
    assert rows["bob@uni.edu"]["name"] == "bob"  # plain text stays as it is
    # Every text cell is quoted: read with `;` as the separator, a cell is never split.
    line = next(ln for ln in r.text.splitlines() if ln.startswith('"ada@'))
    assert line.startswith('"ada@uni.edu","')


def test_every_response_carries_the_security_headers(world: World) -> None:
    b = browser(world)
    for r in (b.get(T1), b.get("/login"), b.get("/static/app.css"), b.get("/no-such-page"),
              world.get(world.ada, API_T1), world.client.get("/api/courses"),
              world.client.get("/healthz"), world.client.get("/openapi.json")):
        assert r.headers["X-Frame-Options"] == "DENY", r.url
        assert r.headers["X-Content-Type-Options"] == "nosniff", r.url
        csp = r.headers["Content-Security-Policy"]
        assert "default-src 'self'" in csp and "frame-ancestors 'none'" in csp, r.url
        assert "unsafe-inline" not in csp, r.url
    page = b.get(T1).text  # the policy fits the pages: no inline script, style or handler
    assert not re.search(r"<script(?![^>]*\bsrc=)|<style|\sstyle=|\son[a-z]+=", page)
    assert "cdn.jsdelivr.net" in world.client.get("/docs").headers["Content-Security-Policy"]


def test_gradescope_answers_alike_for_someone_elses_id_and_an_unknown_one(
        world: World, engine: Engine) -> None:
    sid = world.submit(world.ada, REFERENCE).json()["id"]
    store(engine, sid)
    other = world.get(world.bob, f"/api/submissions/{sid}/gradescope.json")
    unknown = world.get(world.bob, f"/api/submissions/{sid + 1000}/gradescope.json")
    assert other.status_code == unknown.status_code == 404
    assert other.json() == unknown.json()
    assert world.get(world.ada, f"/api/submissions/{sid}/gradescope.json").status_code == 403
    assert world.get(world.prof, f"/api/submissions/{sid}/gradescope.json").status_code == 200


def test_upload_names_with_nul_are_refused_by_the_service() -> None:
    """A multipart client percent-encodes NUL; the service refuses a raw one all the same."""
    import tomllib

    from runners.protocol import Manifest
    from server.services.intake import submissions as submission_service
    from server.services.records.errors import Invalid

    manifest = Manifest.model_validate(tomllib.loads(package_files()["assignment.toml"].decode()))
    with pytest.raises(Invalid, match="NUL"):
        submission_service.check_files([("solution.py", REFERENCE), ("ev\x00il.py", b"x = 1\n")],
                                       manifest=manifest, max_bytes=1 << 20, max_unzipped=1 << 20)


CONTROLS = ["\x00", "\x07", "\x08", "\x1b", "\x7f", "\x85", "\u2028", "\u202e", "\u2066", "\t",
            "\n"]


def _users_and_courses(engine: Engine) -> tuple[int, int]:
    from server.models import Course

    with session_factory(engine)() as s:
        return (int(s.scalar(select(func.count()).select_from(User)) or 0),
                int(s.scalar(select(func.count()).select_from(Course)) or 0))


@hypothesis.settings(max_examples=25, deadline=None,
                     suppress_health_check=[hypothesis.HealthCheck.function_scoped_fixture])
@hypothesis.given(pre=st.text(alphabet="abcXYZ é", max_size=6),
                  control=st.sampled_from(CONTROLS),
                  post=st.text(alphabet="abcXYZ é", max_size=6),
                  writer=st.sampled_from(["register-name", "register-alias", "course-title",
                                          "join-alias", "roster-name", "roster-email",
                                          "lti-issuer"]))
def test_no_writer_stores_a_control_character(world: World, engine: Engine, pre: str,
                                              control: str, post: str, writer: str) -> None:
    """One rule at the boundary (server/text.py) for every writer, on SQLite and PostgreSQL:
    a text with a control character anywhere is a 4xx (or a refused roster row) naming it, never
    a 5xx, and nothing is stored."""
    value = f"a{pre}{control}{post}b"  # inside: a cell's edges are trimmed as whitespace
    before = _users_and_courses(engine)
    if writer.startswith("register"):
        body = {"email": f"x{len(pre)}{len(post)}@uni.edu", "name": "X", "password":
                "copper-meadow-violin-88", "join_code": world.join_code}
        body["name" if writer == "register-name" else "alias"] = value
        r = world.client.post("/api/auth/register", json=body)
    elif writer == "course-title":
        r = world.post(world.prof, "/api/courses", json={"slug": "c-x", "title": value})
    elif writer == "join-alias":
        r = world.post(world.ada, "/api/courses/join",
                       json={"join_code": world.join_code, "alias": value})
    elif writer == "lti-issuer":
        r = world.post(world.prof, "/api/courses/th/lti/platforms", json={
            "issuer": value, "client_id": "c", "auth_login_url": "https://l/a",
            "auth_token_url": "https://l/t", "key_set_url": "https://l/k", "deployment_ids": ["1"]})
    else:
        row = ("z@uni.edu", value) if writer == "roster-name" else (f"z{value}@uni.edu", "Z")
        data = io.StringIO()
        csv.writer(data).writerow(["email", "name"])
        csv.writer(data).writerow(row)
        r = world.post(world.prof, "/api/courses/th/roster",
                       files={"roster": ("r.csv", data.getvalue().encode())})
        assert r.status_code == 200, r.text
        rows = r.json()["rows"]
        if rows:  # a lone "\n" in a cell may end the row early: then nothing at all to import
            assert [x["outcome"] for x in rows] == ["refused"], rows
        with session_factory(engine)() as s:
            from server.models import RosterEntry

            assert s.scalar(select(func.count()).select_from(RosterEntry)) == 0
        return
    assert 400 <= r.status_code < 500, (writer, repr(value), r.status_code, r.text)
    assert _users_and_courses(engine) == before


def test_metrics_answer_only_the_operators_scraper_outside_development(
        engine: Engine, tmp_path: Path) -> None:
    """/metrics counts failed logins per route, among others: in production only a request with
    the operator's metrics token reads it; with no token set it is closed."""
    from server.main import create_app
    from server.settings import ServerSettings

    token = "scrape-" + "s" * 20
    for configured in (token, None):
        settings = ServerSettings(environment="production", secret_key="k" * 32,
                                  database_url="sqlite://", artifacts_dir=tmp_path / "a",
                                  broker_url="memory://", metrics_token=configured)
        with TestClient(create_app(settings, engine)) as c:
            r = c.get("/metrics")
            assert r.status_code == 403 and "metrics token" in r.text, r.text
            assert c.get("/metrics", headers={"Authorization": "Bearer wrong-token-0123456789"}
                         ).status_code == 403
            for bare in (token, f"Basic {token}", f"bearer{token}"):  # only `Bearer <token>`
                assert c.get("/metrics", headers={"Authorization": bare}).status_code == 403
            r = c.get("/metrics", headers={"Authorization": f"Bearer {token}"})
            assert r.status_code == (200 if configured else 403)
            if configured:
                assert "paragrade_http_requests_total" in r.text
    with pytest.raises(ValueError, match="METRICS_TOKEN"):
        ServerSettings(environment="production", secret_key="k" * 32, metrics_token="short")


@pytest.mark.parametrize(("field", "value"), [("quota_count", True), ("quota_window_s", False),
                                              ("deadline", 0), ("deadline", -1),
                                              ("late_penalty", True)])
def test_a_policy_field_takes_its_own_type_only(world: World, field: str, value: object) -> None:
    """`true` is not a count; 0 or -1 is not a deadline (pydantic read them as 1970)."""
    url = API_T1
    before = world.get(world.prof, url).json()
    r = world.client.patch(url, headers=world.prof, json={field: value})
    assert r.status_code == 422, r.text
    assert world.get(world.prof, url).json() == before
