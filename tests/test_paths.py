"""File names never leave their folder: the runner checks the names the server sends again."""

from __future__ import annotations

import io
import zipfile
from pathlib import Path

import httpx
import pytest

from runners import package
from runners.fleet import runner
from runners.protocol import GradeJob, JobOffer, check_relpath
from runners.runs.stage import Stage, UnsafeFileName
from runners.settings import RunnerSettings
from server.services.packages.assignments import bundle, read_folder

UNSAFE = ["../evil.py", "../../../../tmp/evil.py", "/tmp/evil.py", "a/../../evil.py",
          "sub\\..\\..\\evil.py", "evil\x00.py", "", "./solution.py", "a//b.py", ".hidden.py"]


@pytest.mark.parametrize("name", UNSAFE)
def test_check_relpath_refuses_unsafe_names(name: str) -> None:
    with pytest.raises(ValueError):
        check_relpath(name)


@pytest.mark.parametrize("name", UNSAFE)
def test_add_code_writes_nothing_for_an_unsafe_name(name: str, tmp_path: Path) -> None:
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    stage = Stage(scratch=scratch)
    try:
        with pytest.raises(UnsafeFileName, match="refused to write submission code"):
            stage.add_code("submission", {"solution.py": b"x = 1\n", name: b"owned = True\n"})
        # Nothing at all was written: not the safe file, not the folder, nothing beside the stage.
        assert not (stage.root / "code-submission").exists()
        assert sorted(p.name for p in scratch.iterdir()) == [stage.root.name]
        assert not (tmp_path / "evil.py").exists()
    finally:
        stage.cleanup()


def test_add_code_refuses_a_link_out_of_its_folder(tmp_path: Path) -> None:
    """Defence in depth: even a name that passes the rule may not resolve outside the folder."""
    stage = Stage(scratch=tmp_path)
    try:
        (stage.root / "code-sub").symlink_to(tmp_path / "elsewhere", target_is_directory=True)
        (tmp_path / "elsewhere").mkdir()
        with pytest.raises(FileExistsError):  # the code folder is always a fresh one
            stage.add_code("sub", {"x.py": b""})
        assert not (tmp_path / "elsewhere" / "x.py").exists()
    finally:
        stage.cleanup()


def test_add_code_writes_safe_nested_names(tmp_path: Path) -> None:
    stage = Stage(scratch=tmp_path)
    try:
        d = stage.add_code("submission", {"solution.py": b"a = 1\n", "pkg/helpers.py": b"b = 2\n"})
        assert (d / "pkg" / "helpers.py").read_bytes() == b"b = 2\n"
        assert (d / "solution.py").read_bytes() == b"a = 1\n"
    finally:
        stage.cleanup()


def test_an_unsafe_name_from_the_server_is_a_platform_error(tmp_path: Path,
                                                            t1: package.Assignment) -> None:
    """A server that let a bad name through gets no grade and no write: a platform_error."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        zf.writestr("solution.py", b"def f(): pass\n")
        zf.writestr("../../../../tmp/paragrade-evil.py", b"owned = True\n")
    archive, package_zip = buf.getvalue(), bundle(read_folder(t1.root))

    def serve(request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith("/bundle"):
            return httpx.Response(200, content=package_zip)
        if request.url.path.endswith("/submission"):
            return httpx.Response(200, content=archive)
        return httpx.Response(404)

    client = httpx.Client(base_url="http://server", transport=httpx.MockTransport(serve))
    offer = JobOffer(job_id=7, token="t", job=GradeJob(
        submission_id=1, assignment="th/t1-multiprocessing", assignment_version="1.0.0",
        bundle_sha256="0" * 64, submission_sha256="1" * 64, queue="cpu", time_limit_s=60,
        entry_file="solution.py"))
    settings = RunnerSettings(backend="process", scratch_dir=tmp_path / "scratch")
    (tmp_path / "scratch").mkdir()
    outcome = runner.handle(offer, client, runner.BundleCache(tmp_path / "bundles"), settings)
    assert outcome.report is None
    # Refused as the archive is read (runners/protocol/archives.py, the server's reader too),
    # before any name reaches a sandbox's folder.
    assert outcome.platform_error is not None and "UnsafeArchive" in outcome.platform_error
    assert "unsafe path in the archive: '../../../../tmp/paragrade-evil.py'" in \
        outcome.platform_error
    assert not Path("/tmp/paragrade-evil.py").exists()
