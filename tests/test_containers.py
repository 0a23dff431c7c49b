"""The deployment files: the compose file validates, images describe themselves, one recipe.

No Docker engine runs here, so the images are not built in the suite (containers/README.md);
Debian's docker-compose 1.29 validates the compose file without one and rejects unknown keys.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
CONTAINERS = ROOT / "containers"
SECRETS = {"PARAGRADE_RUNNER_TOKEN": "t" * 32, "PARAGRADE_SECRET_KEY": "s" * 32,
           "POSTGRES_PASSWORD": "p" * 16}


def compose(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    binary = shutil.which("docker-compose")
    if binary is None:
        pytest.skip("docker-compose is not installed (scripts/setup.sh installs it)")
    clean = {k: v for k, v in os.environ.items() if k not in SECRETS}
    return subprocess.run([binary, "-f", str(ROOT / "docker-compose.yml"), *args],
                          capture_output=True, text=True, env={**clean, **env}, timeout=60)


def test_the_compose_file_validates_and_has_a_gpu_profile() -> None:
    r = compose("config", "-q", env=SECRETS)
    assert r.returncode == 0, r.stderr
    gpu = compose("--profile", "gpu", "config", env=SECRETS)
    assert gpu.returncode == 0, gpu.stderr
    services = yaml.safe_load(gpu.stdout)["services"]
    # `up` starts the four without a profile; the GPU runner only with --profile gpu.
    assert {n: s.get("profiles") for n, s in services.items()} == {
        "postgres": None, "redis": None, "server": None, "runner-cpu": None, "runner-gpu": ["gpu"]}
    devices = services["runner-gpu"]["deploy"]["resources"]["reservations"]["devices"]
    assert devices == [{"driver": "nvidia", "count": "all", "capabilities": ["gpu"]}]
    # Runners get the broker and the server's URL, never the database.
    for name in ("runner-cpu", "runner-gpu"):
        env = services[name]["environment"]
        assert env["PARAGRADE_BROKER_URL"].startswith("redis://")
        assert not any("DATABASE" in k or "POSTGRES" in k for k in env), name


def test_secrets_have_no_defaults() -> None:
    for missing in SECRETS:
        r = compose("config", "-q", env={k: v for k, v in SECRETS.items() if k != missing})
        assert r.returncode != 0 and f"set {missing}" in r.stderr, (missing, r.stderr)


def test_unknown_keys_are_rejected_so_validation_means_something(tmp_path: Path) -> None:
    bad = tmp_path / "docker-compose.yml"
    bad.write_text((ROOT / "docker-compose.yml").read_text().replace(
        "restart: unless-stopped", "restrat: unless-stopped", 1))
    binary = shutil.which("docker-compose")
    if binary is None:
        pytest.skip("docker-compose is not installed")
    r = subprocess.run([binary, "-f", str(bad), "config", "-q"], capture_output=True, text=True,
                       env={**os.environ, **SECRETS}, timeout=60)
    assert r.returncode != 0 and "restrat" in r.stderr


def _labels(text: str) -> dict[str, str]:
    dockerfile = re.findall(r'(io\.paragrade\.[a-z]+)="([^"]*)"', text)
    apptainer = re.findall(r"^\s+(io\.paragrade\.[a-z]+) (\S+)$", text, re.M)
    return dict(dockerfile + apptainer)


@pytest.mark.parametrize("name, role, queues", [
    ("server.Dockerfile", "server", None),
    ("runner-cpu.Dockerfile", "runner", "cpu,mpi"),
    ("runner-gpu.Dockerfile", "runner", "gpu"),
    ("runner-cpu.def", "runner", "cpu,mpi"),
    ("runner-gpu.def", "runner", "gpu"),
])
def test_images_say_what_they_serve(name: str, role: str, queues: str | None) -> None:
    labels = _labels((CONTAINERS / name).read_text())
    assert labels["io.paragrade.role"] == role
    assert labels.get("io.paragrade.queues") == queues
    from runners.protocol import PROTOCOL_VERSION

    assert labels["io.paragrade.protocol"] == str(PROTOCOL_VERSION)


def test_docker_and_apptainer_images_share_one_recipe() -> None:
    for name in ("server.Dockerfile", "runner-cpu.Dockerfile", "runner-gpu.Dockerfile",
                 "runner-cpu.def"):
        assert "/src/containers/install.sh" in (CONTAINERS / name).read_text(), name
    assert "paragrade/runner-gpu" in (CONTAINERS / "runner-gpu.def").read_text()
    r = subprocess.run(["bash", "-n", str(CONTAINERS / "install.sh")], capture_output=True,
                       text=True)
    assert r.returncode == 0, r.stderr
