"""LTI 1.3 against a stand-in LMS: a student launched from the LMS into t1 gets an account in the
course (no join code), submits, and the grade lands in the LMS gradebook, again after a
regrade; a failed post is retried and shown, never lost; forged, expired, replayed and
unknown-deployment launches are refused."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import Engine

from server.services.lti import passback
from server.settings import ServerSettings
from tests.server.conftest import REFERENCE, World
from tests.server.lms import StandInLms
from tests.server.reports import sample_report, store
from tests.server.test_pages import csrf

TARGET = "http://testserver/c/th/t1-multiprocessing"


@pytest.fixture
def lms(world: World) -> Iterator[StandInLms]:
    lms = StandInLms()
    r = world.post(world.prof, "/api/courses/th/lti/platforms", json=lms.registration())
    assert r.status_code == 201, r.text
    assert r.json()["launch_url"] == "http://testserver/lti/launch"
    lms.tool_jwks = world.client.get("/lti/jwks").json()
    yield lms
    lms.close()


def _browser(world: World) -> TestClient:
    return TestClient(world.client.app, follow_redirects=False)


def _login(b: TestClient, lms: StandInLms, target: str = TARGET) -> dict[str, str]:
    r = b.get("/lti/login", params=lms.login_params(target))
    assert r.status_code == 302, r.text
    assert r.headers["location"].startswith(f"{lms.url}/auth?")
    auth = lms.authorize(r.headers["location"])
    assert auth["redirect_uri"] == "http://testserver/lti/launch"
    return auth


def _launch(b: TestClient, lms: StandInLms, **claims: object):  # type: ignore[no-untyped-def]
    auth = _login(b, lms)
    token = lms.id_token(nonce=auth["nonce"], target=TARGET, **claims)  # type: ignore[arg-type]
    return b.post("/lti/launch", data={"id_token": token, "state": auth["state"]}), token, auth


def test_a_launched_student_submits_and_the_grade_reaches_the_gradebook(
        world: World, engine: Engine, lms: StandInLms) -> None:
    b = _browser(world)
    r, _, _ = _launch(b, lms)
    assert r.status_code == 303 and r.headers["location"] == "/c/th/t1-multiprocessing", r.text
    page = b.get("/c/th/t1-multiprocessing")
    assert page.status_code == 200 and "Lea" in page.text  # logged in, no join code
    r = b.post("/c/th/t1-multiprocessing/submit", data={"csrf_token": csrf(page.text)},
               files=[("files", ("solution.py", REFERENCE))])
    assert r.status_code == 303, r.text
    sid = int(r.headers["location"].rsplit("/", 1)[1])
    # Her account, the LMS's email for her beside it (no LMS is trusted with emails here).
    people = {m["lms_email"]: m["role"]
              for m in world.get(world.prof, "/api/courses/th/members").json()}
    assert people["lea@uni.edu"] == "student"
    store(engine, sid, sample_report())  # the grade lands
    sessions = world.client.app.state.sessions  # type: ignore[attr-defined]
    assert passback.send_pending(sessions=sessions) == (1, 0)  # what the reaper does
    (column, user), posted = next(iter(lms.gradebook.items()))
    assert (column, user) == ("/lineitems/7", "student-1")
    assert (posted["scoreGiven"], posted["scoreMaximum"]) == (90, 100)
    assert posted["gradingProgress"] == "FullyGraded"
    # A regrade changes the grade: it is posted again.
    store(engine, sid, sample_report(credit="held"))
    assert passback.send_pending(sessions=sessions) == (1, 0)
    assert lms.gradebook[("/lineitems/7", "student-1")]["scoreGiven"] == 60
    # The same student launching again is the same account.
    r, _, _ = _launch(_browser(world), lms)
    assert r.status_code == 303
    assert sum(m["lms_email"] == "lea@uni.edu"
               for m in world.get(world.prof, "/api/courses/th/members").json()) == 1


def test_a_failed_post_is_retried_and_shown_never_lost(world: World, engine: Engine,
                                                       lms: StandInLms) -> None:
    b = _browser(world)
    assert _launch(b, lms)[0].status_code == 303
    page = b.get("/c/th/t1-multiprocessing")
    r = b.post("/c/th/t1-multiprocessing/submit", data={"csrf_token": csrf(page.text)},
               files=[("files", ("solution.py", REFERENCE))])
    store(engine, int(r.headers["location"].rsplit("/", 1)[1]), sample_report())
    lms.fail_scores = 1
    sessions = world.client.app.state.sessions  # type: ignore[attr-defined]
    assert passback.send_pending(sessions=sessions) == (0, 1)
    shown, = world.get(world.prof, "/api/courses/th/lti/grades").json()
    assert shown["state"] == "pending" and "503" in shown["last_error"]
    assert shown["attempts"] == 1 and shown["next_try"] is not None
    assert passback.send_pending(sessions=sessions) == (0, 0)  # not due yet: backoff
    with sessions() as s, s.begin():  # time passes
        from server.models import LtiGradePost, now
        s.query(LtiGradePost).update({"next_at": now()})
    assert passback.send_pending(sessions=sessions) == (1, 0)
    shown, = world.get(world.prof, "/api/courses/th/lti/grades").json()
    assert (shown["state"], shown["last_error"]) == ("sent", None)
    assert lms.gradebook[("/lineitems/7", "student-1")]["scoreGiven"] == 90


def test_refused_launches(world: World, lms: StandInLms) -> None:
    from cryptography.hazmat.primitives.asymmetric import rsa

    cases = {
        "expired": {"expires_in": -60},
        "unknown deployment": {"deployment": "deployment-9"},
        "forged signature": {"key": rsa.generate_private_key(public_exponent=65537,
                                                             key_size=2048)},
        "wrong issuer": {"issuer": "https://evil.example.com"},
    }
    for why, claims in cases.items():
        r, _, _ = _launch(_browser(world), lms, **claims)
        assert r.status_code == 403 and "LTI launch refused" in r.text, (why, r.text)
    # A replayed launch (the same id_token and state again) is refused: its nonce was used.
    b = _browser(world)
    r, token, auth = _launch(b, lms)
    assert r.status_code == 303
    r = b.post("/lti/launch", data={"id_token": token, "state": auth["state"]})
    assert r.status_code == 403 and "Nonce" in r.text
    # An unregistered issuer cannot even start a login.
    r = _browser(world).get("/lti/login", params={**lms.login_params(TARGET),
                                                  "iss": "https://evil.example.com"})
    assert r.status_code == 403 and "LTI login refused" in r.text
    assert all(m["lms_email"] != "lea@uni.edu" or m["role"]
               for m in world.get(world.prof, "/api/courses/th/members").json())


def test_only_instructors_register_an_lms(world: World) -> None:
    body = {
        "issuer": "https://lms.example.edu", "client_id": "x", "auth_login_url": "https://l/a",
        "auth_token_url": "https://l/t", "key_set_url": "https://l/k", "deployment_ids": ["1"]}
    assert world.post(world.ada, "/api/courses/th/lti/platforms", json=body).status_code == 403
    r = world.post(world.prof, "/api/courses/th/lti/platforms",
                   json={**body, "auth_login_url": "javascript:alert(1)"})
    assert r.status_code == 422 and "auth_login_url" in r.json()["detail"]
    assert world.post(world.prof, "/api/courses/th/lti/platforms", json=body).status_code == 201
    assert world.post(world.prof, "/api/courses/th/lti/platforms", json=body).status_code == 409
    assert world.get(world.ada, "/api/courses/th/lti/grades").status_code == 403


def test_an_lms_reaches_no_account_it_did_not_make(world: World, lms: StandInLms) -> None:
    """Any instructor can register an LMS, and an LMS can claim any email or issuer: a launch
    never logs in as an existing account by its email, and a registration naming the same
    issuer with other keys is another LMS, whose launches reach none of the first one's
    accounts."""
    b = _browser(world)
    r, _, _ = _launch(b, lms, email="prof@uni.edu", role="Learner")
    assert r.status_code == 303
    assert "Manage the course" not in b.get("/").text  # not the instructor's home page
    people = world.get(world.prof, "/api/courses/th/members").json()
    assert [m["role"] for m in people if m["email"] == "prof@uni.edu"] == ["instructor"]
    assert any(m["email"].endswith("@lti.invalid") for m in people)  # a new account instead
    rogue = StandInLms(client_id="rogue-client")  # the same issuer string, its own keys
    r = world.post(world.prof, "/api/courses/th/lti/platforms", json=rogue.registration())
    assert r.status_code == 201, r.text
    rogue.tool_jwks = world.client.get("/lti/jwks").json()
    before = len(world.get(world.prof, "/api/courses/th/members").json())
    r, _, _ = _launch(_browser(world), rogue)  # sub "student-1" again, as the real LMS's
    assert r.status_code == 303
    assert len(world.get(world.prof, "/api/courses/th/members").json()) == before + 1
    rogue.close()


def test_an_instructor_places_assignments_in_the_lms_by_deep_linking(world: World,
                                                                    lms: StandInLms) -> None:
    import re

    import jwt
    from jwt.algorithms import RSAAlgorithm

    b = _browser(world)
    r, _, _ = _launch(b, lms, role="Instructor", sub="teacher-1", email="t@uni.edu",
                      deep_link_return=f"{lms.url}/deep-return")
    assert r.status_code == 200 and "Place Treasure hunt" in r.text, r.text
    form = {"csrf_token": csrf(r.text),
            "launch_id": re.search(r'name="launch_id" value="([^"]+)"', r.text).group(1)}  # type: ignore[union-attr]
    r = b.post("/lti/deep-link", data={**form, "slugs": ["t1-multiprocessing"]})
    assert r.status_code == 200, r.text
    assert f'action="{lms.url}/deep-return"' in r.text
    token = re.search(r'name="JWT" value="([^"]+)"', r.text).group(1)  # type: ignore[union-attr]
    key = RSAAlgorithm.from_jwk(json.dumps(lms.tool_jwks["keys"][0]))
    claims = jwt.decode(token, key, algorithms=["RS256"], audience=lms.issuer)  # type: ignore[arg-type]
    item, = claims["https://purl.imsglobal.org/spec/lti-dl/claim/content_items"]
    assert item["url"] == "http://testserver/c/th/t1-multiprocessing"
    assert item["lineItem"]["scoreMaximum"] == 100
    # A student's launch cannot place links; an unknown placement is refused.
    r, _, _ = _launch(_browser(world), lms, deep_link_return=f"{lms.url}/deep-return")
    assert r.status_code == 403 and "instructors" in r.text
    r = b.post("/lti/deep-link", data={**form, "launch_id": "lti1p3-launch-nope",
                                       "slugs": ["t1-multiprocessing"]})
    assert r.status_code == 403


def _instructor_with_lms(world: World, engine: Engine, slug: str) -> tuple[dict[str, str],
                                                                            StandInLms]:
    """Another instructor (any instructor can register an LMS), her course and her own LMS."""
    from server.db import session_factory
    from server.services.people import users
    from tests.server.conftest import login

    with session_factory(engine)() as s, s.begin():
        users.create(session=s, email=f"{slug}@other.edu", name=slug.title(),
                     password="orchid-lantern-gravel-41", is_instructor=True)
    who = login(world.client, f"{slug}@other.edu", "orchid-lantern-gravel-41")
    assert world.post(who, "/api/courses", json={"slug": slug, "title": slug}).status_code == 201
    lms = StandInLms(issuer=f"https://{slug}.example.edu")
    r = world.post(who, f"/api/courses/{slug}/lti/platforms", json=lms.registration())
    assert r.status_code == 201, r.text
    lms.tool_jwks = world.client.get("/lti/jwks").json()
    return who, lms


def _launch_at(b: TestClient, lms: StandInLms, target: str, **claims: object):  # type: ignore[no-untyped-def]
    r = b.get("/lti/login", params=lms.login_params(target))
    assert r.status_code == 302, r.text
    auth = lms.authorize(r.headers["location"])
    token = lms.id_token(nonce=auth["nonce"], target=target, **claims)  # type: ignore[arg-type]
    return b.post("/lti/launch", data={"id_token": token, "state": auth["state"]})


def test_an_lms_cannot_take_over_an_email(world: World, engine: Engine) -> None:
    """The takeover an attacker showed, step by step: Mallory registers an LMS for her own course and
    launches as victim@uni.edu before the victim has an account. Her account must not own that
    email: the victim still registers, Prof's roster invites the victim (it does not enrol
    Mallory's account into Prof's course), and Mallory's next launch sees only her course."""
    mallory, evil = _instructor_with_lms(world, engine, "mallory")
    b = _browser(world)
    r = _launch_at(b, evil, "http://testserver/c/mallory", sub="v1", email="victim@uni.edu",
                   name="Victim", role="Learner")
    assert r.status_code == 303, r.text
    seen = world.get(mallory, "/api/courses/mallory/members").json()
    made = [m for m in seen if m["role"] == "student"]
    assert len(made) == 1 and made[0]["email"].endswith("@lti.invalid"), seen
    assert made[0]["lms_email"] == "victim@uni.edu"  # kept, unverified, for her course's staff
    # Prof's roster lists the victim: an invitation, not Mallory's account enrolled.
    r = world.post(world.prof, "/api/courses/th/roster",
                   files={"roster": ("r.csv", b"email,name\nvictim@uni.edu,Victim\n")})
    assert r.status_code == 200, r.text
    assert [row["outcome"] for row in r.json()["rows"]] == ["invited"]
    # Mallory launches again: the same account, and still only her course.
    r = _launch_at(b, evil, "http://testserver/c/mallory", sub="v1", email="victim@uni.edu",
                   name="Victim", role="Learner")
    assert r.status_code == 303
    assert b.get("/c/th").status_code in (403, 404)
    th = world.get(world.prof, "/api/courses/th/members").json()
    assert not [m for m in th if m["email"].endswith("@lti.invalid")], th
    # The victim registers (no 409) and is enrolled in Prof's course by its roster.
    r = world.client.post("/api/auth/register", json={
        "email": "victim@uni.edu", "name": "Victim", "password": "copper-meadow-violin-88",
        "join_code": world.join_code})
    assert r.status_code == 201, r.text
    th = {m["email"]: m for m in world.get(world.prof, "/api/courses/th/members").json()}
    assert th["victim@uni.edu"]["role"] == "student"
    evil.close()


def test_a_trusted_lms_speaks_for_its_domain_only(world: World, engine: Engine, lms: StandInLms,
                                                   settings: ServerSettings) -> None:
    """The operator trusts Prof's LMS for uni.edu: its launch as ada@uni.edu signs in to Ada's
    own account. For another domain, and from another LMS, it still cannot."""
    settings.lti_trusted_email_domains[f"{lms.url}/jwks"] = ["uni.edu"]
    b = _browser(world)
    r = _launch_at(b, lms, TARGET, sub="ada-in-lms", email="Ada@uni.edu", name="Ada")
    assert r.status_code == 303, r.text
    people = world.get(world.prof, "/api/courses/th/members").json()
    assert [m["email"] for m in people if m["email"].endswith("@lti.invalid")] == []
    mine = world.get(world.ada, "/api/courses").json()
    assert "th" in [c["slug"] for c in mine]
    r = _launch_at(_browser(world), lms, TARGET, sub="bob-elsewhere", email="bob@elsewhere.org")
    assert r.status_code == 303
    people = world.get(world.prof, "/api/courses/th/members").json()
    assert [m["lms_email"] for m in people if m["email"].endswith("@lti.invalid")] == [
        "bob@elsewhere.org"]
    _, evil = _instructor_with_lms(world, engine, "mallory")  # not trusted for anything
    r = _launch_at(_browser(world), evil, "http://testserver/c/mallory", sub="x",
                   email="ada@uni.edu")
    assert r.status_code == 303
    assert sum(m["role"] == "student" for m in world.get(
        world.prof, "/api/courses/th/members").json()) == 3  # ada, bob, bob@elsewhere's account
    evil.close()


@pytest.mark.parametrize(("claims", "says"), [
    ({"email": "a\x00b@x.y"}, "U+0000"), ({"name": "Bob\x00"}, "U+0000"),
    ({"name": "Eve\x1b[31m"}, "U+001B"), ({"name": "\u202eevE"}, "U+202E"),
])
def test_a_launch_with_control_characters_is_refused(world: World, lms: StandInLms,
                                                     claims: dict[str, str], says: str) -> None:
    before = world.get(world.prof, "/api/courses/th/members").json()
    r = _launch_at(_browser(world), lms, TARGET, **claims)
    assert r.status_code == 403 and says in r.text, r.text
    assert world.get(world.prof, "/api/courses/th/members").json() == before


def test_a_launch_without_a_real_email_gets_an_account_of_its_own(world: World,
                                                                   lms: StandInLms) -> None:
    r = _launch_at(_browser(world), lms, TARGET, sub="admin-1", email="admin")
    assert r.status_code == 303, r.text
    made = [m for m in world.get(world.prof, "/api/courses/th/members").json()
            if m["email"].endswith("@lti.invalid")]
    assert len(made) == 1 and made[0]["lms_email"] is None


def _link(b: TestClient, email: str, password: str, next: str = "/c/th/t1-multiprocessing",
          **extra: str):  # type: ignore[no-untyped-def]
    form = b.get("/lti/link", params={"next": next})
    assert form.status_code == 200 and "anyone who can sign in to your LMS as you" in form.text
    return b.post("/lti/link", data={"csrf_token": csrf(form.text), "email": email,
                                     "password": password, "next": next, **extra})


def test_a_student_links_the_lms_to_her_own_account(world: World, engine: Engine,
                                                     lms: StandInLms) -> None:
    """Ada has a password account; an untrusted LMS launch made her a second one. Logged in to
    her own from the launched session, she links them: the LMS's launches reach her account
    from then on, the LMS-made one is gone, and its enrolment (another instructor's course,
    launched from that course's LMS) is hers."""
    mallory, other = _instructor_with_lms(world, engine, "mallory")
    b = _browser(world)
    r = _launch_at(b, other, "http://testserver/c/mallory", sub="ada-there", email="ada@uni.edu",
                   name="Ada", role="Learner")
    assert r.status_code == 303, r.text
    page = b.get("/")
    assert page.status_code == 200 and "Link it" in page.text and "mallory" in page.text
    members = world.get(mallory, "/api/courses/mallory/members").json()
    assert [m["email"].endswith("@lti.invalid") for m in members if m["role"] == "student"] == [True]
    # The wrong password: refused, and nothing moved.
    r = _link(b, "ada@uni.edu", "not-her-password-at-all", next="/")
    assert r.status_code == 403 and "wrong email or password" in r.text
    assert world.get(mallory, "/api/courses/mallory/members").json() == members
    assert "mallory" not in [c["slug"] for c in world.get(world.ada, "/api/courses").json()]
    # The page names the LMS and its course before it asks for a password.
    assert "<strong>https://mallory.example.edu</strong>, for the course mallory" in \
        b.get("/lti/link").text
    # Her own password: linked, and this browser is hers.
    r = _link(b, "ada@uni.edu", "studentpass1", next="/")
    assert r.status_code == 303 and r.headers["location"] == "/", r.text
    page = b.get("/")
    assert page.status_code == 200 and "Link it" not in page.text and ">ada<" in page.text
    assert sorted(c["slug"] for c in world.get(world.ada, "/api/courses").json()) == [
        "mallory", "th"]
    members = world.get(mallory, "/api/courses/mallory/members").json()
    students = [m for m in members if m["role"] == "student"]
    assert [(m["email"], m["lms_email"]) for m in students] == [("ada@uni.edu", "ada@uni.edu")]
    # The LMS's next launch, from a fresh browser, signs in to Ada's own account.
    b2 = _browser(world)
    r = _launch_at(b2, other, "http://testserver/c/mallory", sub="ada-there",
                   email="ada@uni.edu", name="Ada", role="Learner")
    assert r.status_code == 303
    home = b2.get("/")
    assert "Link it" not in home.text and ">ada<" in home.text
    assert len(world.get(mallory, "/api/courses/mallory/members").json()) == len(members)
    other.close()


def test_linking_needs_an_lms_made_account_that_has_not_submitted(world: World,
                                                                  lms: StandInLms) -> None:
    # A password account has nothing to link.
    ada = _browser(world)
    page = ada.get("/login")
    r = ada.post("/login", data={"csrf_token": csrf(page.text), "email": "ada@uni.edu",
                                 "password": "studentpass1", "next": "/"})
    assert r.status_code == 303
    assert ada.get("/lti/link").status_code == 303  # no form for her
    r = ada.post("/lti/link", data={"csrf_token": csrf(ada.get("/").text),
                                    "email": "bob@uni.edu", "password": "studentpass1"})
    assert r.status_code == 403 and "not made by an LMS" in r.text
    # An LMS-made account that has submitted: its submissions would be left behind.
    b = _browser(world)
    r = _launch_at(b, lms, TARGET, sub="bob-lms", email="bob@uni.edu", name="Bob")
    assert r.status_code == 303
    page = b.get("/c/th/t1-multiprocessing")
    r = b.post("/c/th/t1-multiprocessing/submit", data={"csrf_token": csrf(page.text)},
               files=[("files", ("solution.py", REFERENCE))])
    assert r.status_code == 303, r.text
    before = world.get(world.prof, "/api/courses/th/members").json()
    r = _link(b, "bob@uni.edu", "studentpass1")
    assert r.status_code == 409 and "ask the course&#39;s staff" in r.text, r.text
    assert world.get(world.prof, "/api/courses/th/members").json() == before
    # And no form post without the page's CSRF token.
    r = b.post("/lti/link", data={"email": "bob@uni.edu", "password": "studentpass1"})
    assert r.status_code == 403


def test_an_upload_in_flight_is_never_lost_to_a_link(world: World, engine: Engine,
                                                     lms: StandInLms) -> None:
    """The LMS-made account uploads and links at the same moment: one of them goes first. The
    upload's submission is never deleted with the account: the link sees it and is refused, or
    the upload comes after the link (into the account it linked to, or refused)."""
    import threading
    from concurrent.futures import ThreadPoolExecutor

    from sqlalchemy import func, select

    from server.db import session_factory
    from server.models import Submission

    def count() -> int:
        with session_factory(engine)() as s:
            return int(s.scalar(select(func.count()).select_from(Submission)) or 0)

    def race(sub: str) -> tuple[bool, int, int]:
        """Upload and link at once from a fresh LMS-made account: taken?, the link's status,
        submissions stored."""
        b = _browser(world)
        r = _launch_at(b, lms, TARGET, sub=sub, email="bob@uni.edu", name="Bob")
        assert r.status_code == 303
        upload_page, link_page = b.get("/c/th/t1-multiprocessing"), b.get("/lti/link")
        before = count()
        start = threading.Barrier(2)

        def upload() -> bool:
            """Whether the upload was taken (a refusal, or a sign-in gone, answers otherwise)."""
            start.wait()
            r = b.post("/c/th/t1-multiprocessing/submit",
                       data={"csrf_token": csrf(upload_page.text)},
                       files=[("files", ("solution.py", REFERENCE))])
            return r.status_code == 303 and r.headers["location"].startswith("/s/")

        def link() -> int:
            start.wait()
            return b.post("/lti/link", data={"csrf_token": csrf(link_page.text),
                                             "email": "bob@uni.edu", "password": "studentpass1",
                                             "next": "/"}).status_code

        with ThreadPoolExecutor(2) as pool:
            uploaded, linked = pool.submit(upload), pool.submit(link)
            up, ln = uploaded.result(), linked.result()
        b.close()
        return up, ln, count() - before

    for i in range(3):
        up, ln, stored = race(f"bob-lms-{i}")
        # A submission taken is still stored (the link deleted the account it was made in: lost).
        # An upload after the link goes to the account the browser is now signed in to.
        assert stored == up, (up, ln, stored)
        assert ln in (303, 409), ln  # linked, or refused for the submission it saw


def test_a_teams_grade_reaches_each_members_gradebook_row(world: World, engine: Engine,
                                                         lms: StandInLms) -> None:
    """Two students launched from the LMS work in a pair: one hands in for the team, and the
    team's grade is posted for each of them."""
    r = world.client.patch("/api/courses/th/assignments/t1-multiprocessing",
                           json={"team_max": 2, "team_min": 2}, headers=world.prof)
    assert r.status_code == 200, r.text
    lea, max_ = _browser(world), _browser(world)
    assert _launch(lea, lms)[0].status_code == 303
    auth = _login(max_, lms)
    token = lms.id_token(nonce=auth["nonce"], target=TARGET, sub="student-2",
                         email="max@uni.edu", name="Max")
    assert max_.post("/lti/launch", data={"id_token": token, "state": auth["state"]}
                     ).status_code == 303
    page = "/c/th/t1-multiprocessing"
    form = lea.get(page).text
    assert lea.post(f"{page}/team", data={"csrf_token": csrf(form), "name": "Pair"}
                    ).status_code == 303
    code = lea.get(page).text.split("Join code: <code>")[1].split("</code>")[0]
    form = max_.get(page).text
    assert max_.post(f"{page}/team/join", data={"csrf_token": csrf(form), "code": code}
                     ).status_code == 303
    form = max_.get(page).text
    r = max_.post(f"{page}/submit", data={"csrf_token": csrf(form)},
                  files=[("files", ("solution.py", REFERENCE))])
    assert r.status_code == 303, r.text
    store(engine, int(r.headers["location"].rsplit("/", 1)[1]), sample_report())
    sessions = world.client.app.state.sessions  # type: ignore[attr-defined]
    assert passback.send_pending(sessions=sessions) == (2, 0)
    assert {user: posted["scoreGiven"] for (_, user), posted in lms.gradebook.items()} == {
        "student-1": 90, "student-2": 90}, lms.gradebook
