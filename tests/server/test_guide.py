"""The guide (docs/ built by MkDocs) is served at /guide/ and linked from every page when built."""

from pathlib import Path

from fastapi.testclient import TestClient
from sqlalchemy.engine import Engine

from server.main import create_app
from server.settings import ServerSettings


def _app(settings: ServerSettings, engine: Engine, guide: Path) -> TestClient:
    return TestClient(create_app(settings.model_copy(update={"guide_dir": guide}), engine))


def test_a_built_guide_is_served_and_linked(settings: ServerSettings, engine: Engine,
                                            tmp_path: Path) -> None:
    guide = tmp_path / "site"
    (guide / "students").mkdir(parents=True)
    (guide / "index.html").write_text("<h1>The guide</h1>")
    (guide / "students" / "index.html").write_text("<h1>Submitting work</h1>")
    (tmp_path / "secret.txt").write_text("not part of the guide")
    with _app(settings, engine, guide) as c:
        assert "The guide" in c.get("/guide/").text
        assert "Submitting work" in c.get("/guide/students/").text
        assert 'href="/guide/"' in c.get("/login").text
        assert c.get("/guide/../secret.txt").status_code == 404
        assert c.get("/guide/%2e%2e/secret.txt").status_code == 404


def test_no_guide_built_no_link(settings: ServerSettings, engine: Engine, tmp_path: Path) -> None:
    with _app(settings, engine, tmp_path / "nothing") as c:
        assert c.get("/guide/").status_code == 404
        assert "/guide/" not in c.get("/login").text
