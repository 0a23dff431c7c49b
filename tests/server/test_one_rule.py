"""Rules written once and called wherever they apply (issue: the server's house in rooms): the
package size check answers the same from the API and the course page, and one zip reader
(runners/protocol/archives.py) refuses the same archives on the server and on the runner."""

from __future__ import annotations

import io
import stat
import zipfile
from pathlib import Path

import pytest

from runners.fleet.bundles import BundleCache
from runners.protocol import archives
from server.services.packages import assignments as assignment_service
from server.services.records.errors import Invalid
from tests.server.conftest import World, zip_of
from tests.server.test_pages import browser, csrf


def test_an_oversized_package_is_413_from_the_api_and_the_page_alike(world: World) -> None:
    settings = world.client.app.state.settings  # type: ignore[attr-defined]
    settings.max_package_bytes = 1000  # the body cap stays the app's: the route's check answers
    big = zip_of({"assignment.toml": b"# " + b"x" * 2000 + b"\n"})
    r = world.client.post("/api/courses/th/assignments/upload", headers=world.prof,
                          files=[("package", ("p.zip", big))])
    assert r.status_code == 413 and "package larger than 1000 bytes" in r.text, r.text
    prof = browser(world, "prof@uni.edu", "prof-pass-4821")
    page = prof.post("/c/th/import", data={"csrf_token": csrf(prof.get("/c/th").text)},
                     files=[("package", ("p.zip", big))])
    assert page.status_code == 413 and "package larger than 1000 bytes" in page.text
    got = world.client.get("/api/courses/th/assignments", headers=world.prof).json()
    assert [a["slug"] for a in got] == ["t1-multiprocessing"]  # nothing imported


def _link(name: str, target: str) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        info = zipfile.ZipInfo(name)
        info.external_attr = (stat.S_IFLNK | 0o777) << 16
        zf.writestr(info, target)
    return buf.getvalue()


BAD = {
    "traversal": (zip_of({"../evil.py": b"x"}), "unsafe path"),
    "absolute": (zip_of({"/etc/evil": b"x"}), "unsafe path"),
    "backslash": (zip_of({"a\\..\\b.py": b"x"}), "unsafe path"),
    "link": (_link("starter/l", "/etc/passwd"), "symbolic links"),
    "control": (zip_of({"a\x1b[2J.py": b"x"}), "control characters"),
    "many": (zip_of({f"f{i}": b"" for i in range(archives.MAX_MEMBERS + 1)}), "more than"),
    "damaged": (b"PK\x03\x04 not a zip", "not a zip archive"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_one_zip_reader_refuses_the_same_archives_on_the_server_and_the_runner(
        case: str, tmp_path: Path) -> None:
    data, why = BAD[case]
    with pytest.raises(archives.UnsafeArchive, match=why):
        archives.members(data)
    with pytest.raises(Invalid, match=why):  # an upload or a stored archive, on the server
        assignment_service.safe_members(data)
    cache = BundleCache(tmp_path / "bundles")  # a bundle the runner fetched
    with pytest.raises(archives.UnsafeArchive, match=why):
        cache.folder("th/t1", "0" * 64, fetch=data)
    assert not any((tmp_path / "bundles").iterdir())  # nothing left half unpacked
    assert not (tmp_path / "etc").exists() and not (tmp_path / "evil.py").exists()


def test_a_good_bundle_unpacks_under_its_course_and_slug(tmp_path: Path) -> None:
    """Also one the server built from a folder whose data compresses far (a shipped package is
    never ratio-checked on import): the runner reads what its server made."""
    cache = BundleCache(tmp_path)
    zeros = zip_of({"data/zeros": b"\0" * (4 << 20)}, zipfile.ZIP_DEFLATED)
    assert cache.folder("th/t2", "2" * 64, fetch=zeros) is not None
    folder = cache.folder("th/t1", "1" * 64, fetch=zip_of({"assignment.toml": b"a", "s/x.py": b"b"}))
    assert folder is not None and (folder / "s" / "x.py").read_bytes() == b"b"
    assert cache.folder("th/t1", "1" * 64) == folder  # kept: the hash names its content


def test_an_upload_that_compresses_past_the_ratio_is_refused_as_a_bomb() -> None:
    bomb = zip_of({"zeros": b"\0" * (4 << 20)}, zipfile.ZIP_DEFLATED)
    with pytest.raises(archives.UnsafeArchive, match="compression ratio"):
        archives.members(bomb)
    with pytest.raises(Invalid, match="compression ratio"):
        assignment_service.safe_members(bomb, max_total=1 << 30)
