"""A runner: claims grading jobs from a server over HTTP, grades them, posts the outcome.

It holds no database credentials: the runner token lets it claim jobs, and each job comes with
its own secret for that job's bundle, archive and result. Bundles are cached by content hash.
"""

from __future__ import annotations

import io
import logging
import os
import shutil
import tempfile
import time
import zipfile
from pathlib import Path

import httpx

from runners import grader, package, validate
from runners.protocol import GradeReport, JobOffer, JobOutcome, ValidationCheck
from runners.settings import RunnerSettings, get_settings

log = logging.getLogger("paragrade.runner")


class BundleCache:
    """Assignment bundles unpacked once per content hash, as <root>/<sha>-<course>-<slug>/…"""

    def __init__(self, root: Path) -> None:
        self.root = root
        root.mkdir(parents=True, exist_ok=True)

    def folder(self, assignment: str, sha256: str, fetch: bytes | None = None) -> Path | None:
        """The unpacked package, unpacking `fetch` first if given; None when not cached."""
        course, slug = assignment.split("/", 1)
        # The course name is part of the package's identity on disk (course/slug), so of the key.
        sha_dir = self.root / f"{sha256}-{course}-{slug}"
        target = sha_dir / course / slug
        if target.is_dir() or fetch is None:
            return target if target.is_dir() else None
        tmp = Path(tempfile.mkdtemp(dir=self.root))
        with zipfile.ZipFile(io.BytesIO(fetch)) as zf:
            for info in zf.infolist():
                name = Path(info.filename)
                if name.is_absolute() or ".." in name.parts:
                    raise ValueError(f"unsafe path in bundle: {info.filename}")
            zf.extractall(tmp / course / slug)
        try:
            os.rename(tmp, sha_dir)  # atomic; another runner may have won the race
        except OSError:
            shutil.rmtree(tmp, ignore_errors=True)
        return target


def _package(offer: JobOffer, client: httpx.Client, cache: BundleCache) -> Path:
    what = offer.job or offer.validate_job
    assert what is not None
    folder = cache.folder(what.assignment, what.bundle_sha256)
    if folder is None:
        r = client.get(f"/api/runner/jobs/{offer.job_id}/bundle",
                       headers={"X-Job-Token": offer.token})
        r.raise_for_status()
        folder = cache.folder(what.assignment, what.bundle_sha256, r.content)
    assert folder is not None
    return folder


def handle(offer: JobOffer, client: httpx.Client, cache: BundleCache,
           settings: RunnerSettings) -> JobOutcome:
    """Grade or validate what the offer names; platform failures become a platform_error."""
    try:
        folder = _package(offer, client, cache)
        if offer.validate_job is not None:
            checks = validate.validate(folder, settings=settings)
            return JobOutcome(checks=[ValidationCheck(name=c.name, ok=c.ok, problems=c.problems,
                                                      skipped=c.skipped) for c in checks])
        r = client.get(f"/api/runner/jobs/{offer.job_id}/submission",
                       headers={"X-Job-Token": offer.token})
        r.raise_for_status()
        with zipfile.ZipFile(io.BytesIO(r.content)) as zf:
            files = {n: zf.read(n) for n in zf.namelist()}
        report: GradeReport = grader.grade(package.load(folder), files, settings=settings)
        return JobOutcome(report=report)
    except (httpx.HTTPError, OSError, ValueError, zipfile.BadZipFile, package.PackageError) as exc:
        log.exception("job %s failed on the platform side", offer.job_id)
        return JobOutcome(platform_error=f"{type(exc).__name__}: {exc}"[:2000])


def run(*, server: str, token: str, queues: list[str], name: str, once: bool = False,
        poll_s: float = 1.0, settings: RunnerSettings | None = None) -> int:
    """Claim and grade jobs until stopped (or, with `once`, until the queue is empty)."""
    settings = settings or get_settings()
    cache = BundleCache((settings.scratch_dir or Path(tempfile.gettempdir())) / "paragrade-bundles")
    done = 0
    with httpx.Client(base_url=server, headers={"Authorization": f"Bearer {token}"},
                      timeout=60) as client:
        while True:
            try:
                r = client.post("/api/runner/claim",
                                params={"runner": name, "queues": ",".join(queues)})
            except httpx.HTTPError as exc:
                log.warning("server unreachable: %s", exc)
                time.sleep(poll_s * 5)
                continue
            if r.status_code == 204:
                if once:
                    return done
                time.sleep(poll_s)
                continue
            r.raise_for_status()
            offer = JobOffer.model_validate(r.json())
            log.info("job %s: %s %s", offer.job_id,
                     "validate" if offer.validate_job else "grade",
                     (offer.job or offer.validate_job).assignment)  # type: ignore[union-attr]
            outcome = handle(offer, client, cache, settings)
            for attempt in range(5):
                try:
                    client.post(f"/api/runner/jobs/{offer.job_id}/result",
                                content=outcome.model_dump_json(),
                                headers={"X-Job-Token": offer.token,
                                         "Content-Type": "application/json"}).raise_for_status()
                    break
                except httpx.HTTPError as exc:
                    log.warning("posting job %s's result failed (%s); retrying", offer.job_id, exc)
                    time.sleep(2 ** attempt)
            done += 1
