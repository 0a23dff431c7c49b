"""The deployment files: the compose file validates, images describe themselves, one recipe.

The server and CPU runner images are built and run in tests/test_images.py (marker `images`).
This module checks, without building, what can be checked of every recipe, in particular of
those no machine here can build: the GPU image (CUDA base) and the Apptainer definitions. Their
COPY and %files sources exist and are not in .dockerignore, every install.sh run names a phase
and kind install.sh accepts, the runners run install.sh's phases in step, and the requirement
files the runtime phase reads are in the image before it runs. Debian's docker-compose 1.29
validates the compose file without an engine and rejects unknown keys.
"""

from __future__ import annotations

import glob
import json
import os
import re
import shutil
import subprocess
import tempfile
from fnmatch import fnmatchcase
from pathlib import Path, PurePosixPath

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
CONTAINERS = ROOT / "containers"
RECIPES = sorted([*CONTAINERS.glob("*.Dockerfile"), *CONTAINERS.glob("*.def")])
DOCKERFILES = [r for r in RECIPES if r.suffix == ".Dockerfile"]
IMAGE_SRC = PurePosixPath("/src")  # install.sh's default $SRC, which every Dockerfile keeps
SECRETS = {"PARAGRADE_SECRET_KEY": "s" * 32, "POSTGRES_PASSWORD": "p" * 16}
RUNNER_CREDENTIALS = {"PARAGRADE_RUNNER_CPU_TOKEN": "c" * 43, "PARAGRADE_RUNNER_GPU_TOKEN": "g" * 43}
"""Issued by the server once it runs (`paragrade admin runner add`): the stack must start without
them, and then a runner has no secret at all (the server refuses it, by name), never a default."""


def compose(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    binary = shutil.which("docker-compose")
    if binary is None:
        pytest.skip("docker-compose is not installed (scripts/setup.sh installs it)")
    clean = {k: v for k, v in os.environ.items()
             if k not in SECRETS and k not in RUNNER_CREDENTIALS and k != "PARAGRADE_FLEET_TOKEN"}
    # An operator's .env beside the compose file would fill the secrets these tests leave out.
    with tempfile.NamedTemporaryFile(suffix=".env") as no_env:
        return subprocess.run([binary, "-f", str(ROOT / "docker-compose.yml"), "--env-file", no_env.name,
                               *args], capture_output=True, text=True, env={**clean, **env}, timeout=60)


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

    def runner_secrets(env: dict[str, str]) -> dict[str, str]:
        r = compose("--profile", "gpu", "config", env=env)
        assert r.returncode == 0, r.stderr
        services = yaml.safe_load(r.stdout)["services"]
        return {name: str(services[name]["environment"].get("PARAGRADE_RUNNER_TOKEN") or "")
                for name in ("runner-cpu", "runner-gpu")} | {
            "fleet": str(services["server"]["environment"].get("PARAGRADE_SERVER_RUNNER_TOKEN")
                         or "")}

    # Before the server has issued them: no runner secret at all, and no fleet token.
    assert runner_secrets(SECRETS) == {"runner-cpu": "", "runner-gpu": "", "fleet": ""}
    # Each runner its own credential.
    assert runner_secrets({**SECRETS, **RUNNER_CREDENTIALS}) == {
        "runner-cpu": "c" * 43, "runner-gpu": "g" * 43, "fleet": ""}


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


# --- the recipes, read as the engines read them ---------------------------------------------------

def _find(pattern: str, text: str) -> re.Match[str]:
    match = re.search(pattern, text, re.M | re.S)
    assert match, f"no {pattern!r} in the text"
    return match


def _steps(dockerfile: Path) -> list[str]:
    """A Dockerfile's instructions: continuations joined, comment lines dropped, spaces collapsed."""
    steps: list[str] = []
    current: list[str] = []
    for line in dockerfile.read_text().splitlines():
        if not line.strip() or line.lstrip().startswith("#"):  # Docker drops these, even mid-step
            continue
        current.append(line.rstrip().removesuffix("\\"))
        if not line.rstrip().endswith("\\"):
            steps.append(" ".join(" ".join(current).split()))
            current = []
    return steps


def _definition(path: Path) -> dict[str, str]:
    """An Apptainer definition's header fields (`Bootstrap`, `From`) and %sections, by name."""
    parts: dict[str, str] = {}
    section = ""
    for line in path.read_text().splitlines():
        if line.startswith("%"):
            section = line.split()[0]
            parts[section] = ""
        elif section:
            parts[section] += line + "\n"
        elif header := re.match(r"(\w+):\s*(.*)", line):
            parts[header[1]] = header[2].strip()
    return parts


def _copies(steps: list[str], context: Path) -> list[tuple[PurePosixPath, PurePosixPath]]:
    """(path in the build context, path in the image) of each COPY source (not stage copies)."""
    pairs = []
    for step in steps:
        keyword, _, args = step.partition(" ")
        words = json.loads(args) if args.startswith("[") else args.split()
        if keyword.upper() != "COPY" or any(w.startswith("--from") for w in words):
            continue
        *sources, dest = [w for w in words if not w.startswith("--")]
        for source in sources:
            # A source that matches nothing stays, so that the check reports it missing.
            for match in glob.glob(source.lstrip("/"), root_dir=context) or [source.lstrip("/")]:
                target = PurePosixPath(dest)
                # A folder's contents go to dest; a file into dest when dest is a folder.
                if not (context / match).is_dir() and (dest.endswith("/") or len(sources) > 1):
                    target /= PurePosixPath(match).name
                pairs.append((PurePosixPath(match), target))
    return pairs


def _ignored(path: PurePosixPath, patterns: list[str]) -> bool:
    """Whether .dockerignore excludes `path` or a folder holding it (`**/x`: x at any depth)."""
    parts = path.parts
    return any(fnmatchcase("/".join(parts[start:end]), pattern.removeprefix("**/"))
               for pattern in patterns for end in range(1, len(parts) + 1)
               for start in (range(end) if pattern.startswith("**/") else [0]))


def _copy_problems(dockerfile: Path, context: Path) -> list[str]:
    """The COPY sources missing from the build context or excluded by its .dockerignore."""
    ignore = context / ".dockerignore"
    lines = ignore.read_text().splitlines() if ignore.exists() else []
    patterns = [p.strip().strip("/") for p in lines if p.strip() and not p.startswith("#")]
    return [f"{source}: {'in .dockerignore' if (context / source).exists() else 'missing'}"
            for source, _ in _copies(_steps(dockerfile), context)
            if not (context / source).exists() or _ignored(source, patterns)]


def _install_sh() -> str:
    return (CONTAINERS / "install.sh").read_text()


def _accepted(variable: str) -> dict[str, str]:
    """install.sh's `case "$VARIABLE"` arms: each word it accepts, with that arm's commands."""
    block = _find(rf'case "\${variable}" in(.*?)esac', _install_sh())[1]
    return {word: commands for words, commands in re.findall(r"([\w|-]+)\)\s*(.*?)\s*;;", block)
            for word in words.split("|")}


def _all_phases() -> list[str]:
    """The phases `install.sh all` runs, in its order (its arm calls each phase's function)."""
    arms = _accepted("PHASE")
    phase_of = {commands: phase for phase, commands in arms.items() if phase != "all"}
    return [phase_of[function] for function in re.split(r";\s*", arms["all"])]


def _install_calls(text: str) -> list[tuple[str, str]]:
    """(phase, kind) of each `install.sh PHASE [KIND]` in a shell text, install.sh's default kind."""
    default = _find(r"^KIND=\$\{2:-(\w+)\}", _install_sh())[1]
    return [(phase, kind or default) for phase, kind
            in re.findall(r"containers/install\.sh[ \t]+([\w-]+)(?:[ \t]+([\w-]+))?", text)]


def _calls(recipe: Path) -> list[tuple[str, str]]:
    """The install.sh runs of a recipe itself: a Dockerfile's RUN steps, a definition's %post."""
    if recipe.suffix == ".def":
        return _install_calls(_definition(recipe).get("%post", ""))
    return [call for step in _steps(recipe) if step.startswith("RUN ") for call in _install_calls(step)]


def _phases(recipe: Path) -> list[tuple[str, str]]:
    """Every install.sh phase an image goes through: its base image's (docker-daemon), then its own."""
    inherited: list[tuple[str, str]] = []
    definition = _definition(recipe) if recipe.suffix == ".def" else {}
    if definition.get("Bootstrap") == "docker-daemon":  # paragrade/runner-gpu:latest, built here
        image = definition["From"].split(":")[0].split("/")[-1]
        inherited = _phases(recipe.with_name(f"{image}.Dockerfile"))
    return inherited + [(each, kind) for phase, kind in _calls(recipe)
                        for each in (_all_phases() if phase == "all" else [phase])]


def _runtime_files(kind: str) -> set[str]:
    """The runners/ files install.sh's runtime phase reads for a kind (its `if cpu ... else` split)."""
    body = _find(r"^runtime\(\) \{$(.*?)^\}$", _install_sh())[1]
    before, branches = re.split(r'^\s*if \[ "\$KIND" = cpu \]; then$', body, maxsplit=1, flags=re.M)
    branches, after = re.split(r"^\s*fi$", branches, maxsplit=1, flags=re.M)
    cpu, other = re.split(r"^\s*(?:elif|else)\b.*?$", branches, maxsplit=1, flags=re.M)
    return set(re.findall(r"\$SRC/(runners/[\w.-]+)", before + (cpu if kind == "cpu" else other) + after))


def _missing_runtime_files(dockerfile: Path, kind: str) -> list[str]:
    """The files the runtime phase reads that no COPY puts under /src before `install.sh runtime`."""
    steps = _steps(dockerfile)
    runtime = next(i for i, step in enumerate(steps)
                   if step.startswith("RUN ") and ("runtime", kind) in _install_calls(step))
    copies = _copies(steps[:runtime], ROOT)
    return sorted(str(needed) for needed in map(PurePosixPath, _runtime_files(kind))
                  if not any(IMAGE_SRC / needed == image / needed.relative_to(source)
                             for source, image in copies if needed.is_relative_to(source)))


# --- what the recipes must get right ---------------------------------------------------------------

@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.name)
def test_copy_sources_exist_and_are_not_dockerignored(dockerfile: Path) -> None:
    assert _copies(_steps(dockerfile), ROOT), "no COPY found: the parse is broken"
    assert _copy_problems(dockerfile, ROOT) == []


def test_the_copy_check_sees_missing_and_ignored_sources(tmp_path: Path) -> None:
    (tmp_path / ".dockerignore").write_text("# build output\nvar\n**/__pycache__\n")
    (tmp_path / "pkg" / "__pycache__").mkdir(parents=True)
    (tmp_path / "var").mkdir()
    (tmp_path / "a.txt").write_text("")
    (tmp_path / "Dockerfile").write_text(
        "FROM scratch\nCOPY a.txt \\\n  missing.txt \\\n# a comment inside the step\n"
        "  pkg/__pycache__ var /dst/\nCOPY --from=build /nowhere /x\nCOPY pkg /pkg\n")
    assert _copy_problems(tmp_path / "Dockerfile", tmp_path) == [
        "missing.txt: missing", "pkg/__pycache__: in .dockerignore", "var: in .dockerignore"]


def test_apptainer_files_sources_exist() -> None:
    sources = [line.split()[0] for definition in CONTAINERS.glob("*.def")
               for line in _definition(definition).get("%files", "").splitlines() if line.strip()]
    assert sources, "no %files found: the parse is broken"
    # `apptainer build` runs from the repository root (containers/README.md).
    assert [s for s in sources if not glob.glob(s, root_dir=ROOT)] == []


@pytest.mark.parametrize("recipe", RECIPES, ids=lambda p: p.name)
def test_install_sh_runs_name_a_phase_and_a_kind_it_accepts(recipe: Path) -> None:
    phases, kinds = _accepted("PHASE"), _accepted("KIND")
    assert [c for c in _calls(recipe) if c[0] not in phases or c[1] not in kinds] == []


def test_install_sh_refuses_an_unknown_phase_or_kind() -> None:
    # What makes the accepted words read from its `case` arms all it accepts.
    for args, message in ((["bogus"], "unknown phase bogus"), (["system", "bogus"], "unknown kind bogus")):
        r = subprocess.run(["bash", str(CONTAINERS / "install.sh"), *args], capture_output=True,
                           text=True, timeout=30, env={**os.environ, "SRC": "/nonexistent"})
        assert r.returncode == 2 and message in r.stderr, (args, r.returncode, r.stderr)


@pytest.mark.parametrize("name, kind", [("runner-cpu.Dockerfile", "cpu"), ("runner-cpu.def", "cpu"),
                                        ("runner-gpu.Dockerfile", "gpu"), ("runner-gpu.def", "gpu")])
def test_runner_recipes_run_the_same_phases(name: str, kind: str) -> None:
    # runner-cpu.Dockerfile's phases are `install.sh all`'s, one layer each; the others keep up.
    assert _phases(CONTAINERS / "runner-cpu.Dockerfile") == [(p, "cpu") for p in _all_phases()]
    assert _phases(CONTAINERS / name) == [(p, kind) for p in _all_phases()]


@pytest.mark.parametrize("name, kind", [("runner-cpu.Dockerfile", "cpu"), ("runner-gpu.Dockerfile", "gpu")])
def test_the_runtime_phase_has_the_requirement_files_it_reads(name: str, kind: str) -> None:
    assert "runners/runtime-requirements.txt" in _runtime_files(kind), "install.sh's parse is broken"
    assert _missing_runtime_files(CONTAINERS / name, kind) == []


def test_the_runtime_files_check_sees_a_missing_copy(tmp_path: Path) -> None:
    text = (CONTAINERS / "runner-gpu.Dockerfile").read_text()
    broken = tmp_path / "runner-gpu.Dockerfile"
    broken.write_text(text.replace(" runners/runtime-requirements-gpu.txt /src/runners/", " /src/runners/"))
    assert broken.read_text() != text
    assert _missing_runtime_files(broken, "gpu") == ["runners/runtime-requirements-gpu.txt"]


@pytest.mark.parametrize("definition", sorted(CONTAINERS.glob("*.def")), ids=lambda p: p.name)
def test_apptainer_images_say_what_their_docker_twins_say(definition: Path) -> None:
    keys = ("io.paragrade.role", "io.paragrade.queues")
    twin = _labels(definition.with_suffix(".Dockerfile").read_text())
    assert {k: _labels(definition.read_text()).get(k) for k in keys} == {k: twin.get(k) for k in keys}


def test_server_and_cpu_runner_share_their_first_steps() -> None:
    # Word for word up to paragrade's dependencies: the engine builds those layers once for both.
    server, runner = (_steps(CONTAINERS / name) for name in ("server.Dockerfile", "runner-cpu.Dockerfile"))
    shared = next(i for i, step in enumerate(server)
                  if step.startswith("RUN ") and "app-deps" in dict(_install_calls(step))) + 1
    assert runner[:shared] == server[:shared]
