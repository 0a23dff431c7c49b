"""The boundaries DESIGN.md draws, checked on the source."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from runners.settings import REPO_ROOT

PACKAGES = ("runners", "server", "paragrade")
MODULE_LINES_MAX = 460
"""A module a newcomer reads in one sitting holds one idea; past this many lines it holds several
and is split by concept (tests and benchmarks, read a case at a time, are exempt)."""
NOT_MODULE_FOLDERS = ("tests", "bench")


def imports_of(folder: Path) -> dict[Path, set[str]]:
    found: dict[Path, set[str]] = {}
    for path in folder.rglob("*.py"):
        names: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names |= {a.name for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module:
                names.add(node.module)
        found[path] = names
    return found


def module_name(path: Path) -> str:
    parts = path.relative_to(REPO_ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _type_checking_only(tree: ast.Module) -> set[int]:
    """ids of the nodes under `if TYPE_CHECKING:` (imports for annotations, never executed)."""
    skipped: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and (
                (isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING")
                or (isinstance(node.test, ast.Attribute) and node.test.attr == "TYPE_CHECKING")):
            skipped |= {id(inner) for stmt in node.body for inner in ast.walk(stmt)}
    return skipped


def import_graph(package: str) -> dict[str, dict[str, int]]:
    """Each module of `package` -> the modules of `package` it imports, with the line of the first
    such import; function-level imports count, TYPE_CHECKING-only ones do not.

    `from pkg import sub` is an edge to the submodule `pkg.sub` (not to `pkg`'s `__init__`): the
    parent package Python loads on the way is no dependency of the importing module's code."""
    paths = {module_name(p): p for p in (REPO_ROOT / package).rglob("*.py")}
    graph: dict[str, dict[str, int]] = {}
    for name, path in paths.items():
        tree = ast.parse(path.read_text())
        skipped = _type_checking_only(tree)
        here = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
        edges: dict[str, int] = {}
        for node in ast.walk(tree):
            if id(node) in skipped:
                continue
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    base = ".".join(here[: len(here) - node.level + 1] + ([base] if base else []))
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in paths else base
                           for a in node.names]
            for target in targets:
                while target and target not in paths:  # `import a.b.c` of a name inside a.b
                    target = target.rpartition(".")[0]
                if target and target != name:
                    edges.setdefault(target, node.lineno)
        graph[name] = edges
    return graph


def circles(graph: dict[str, dict[str, int]]) -> list[list[str]]:
    """The strongly connected groups of more than one module (Tarjan): each holds a circle."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group: list[str] = []
            while not group or group[-1] != v:
                group.append(stack.pop())
            if len(group) > 1:
                found.append(sorted(group))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_runners_never_import_server() -> None:
    for path, names in imports_of(REPO_ROOT / "runners").items():
        assert not any(n == "server" or n.startswith("server.") for n in names), path


RUNNER_LAYERS = ("protocol", "settings package", "sandbox", "harness", "nodes", "runs",
                 "measure", "grading", "fleet", "cli")
"""runners/ from the bottom up (docs/contributors/architecture.md, "Where each idea lives"): a
module imports only from its own folder or the folders below it, annotations included."""


def _runner_layer(module: str) -> int:
    part = module.split(".")[1] if "." in module else ""
    found = [i for i, layer in enumerate(RUNNER_LAYERS) if part in layer.split()]
    assert found, f"{module}: runners/{part} is in no layer of RUNNER_LAYERS"
    return found[0]


def test_runner_folders_depend_one_way() -> None:
    """Each folder of runners/ uses only those below it: the tree reads from the protocol up to
    the command line, and a reader following an import never climbs back. Imports under
    TYPE_CHECKING count here (a type borrowed from above is a dependency a reader follows)."""
    wrong = []
    for path, names in imports_of(REPO_ROOT / "runners").items():
        here = module_name(path)
        if here == "runners":
            continue
        for name in names:
            if name.startswith("runners.") and _runner_layer(name) > _runner_layer(here):
                wrong.append(f"{here} imports {name}")
    for path in (REPO_ROOT / "runners").rglob("*.py"):  # `from runners import x`
        here = module_name(path)
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module == "runners":
                wrong += [f"{here} imports runners.{a.name}" for a in node.names
                          if _runner_layer(f"runners.{a.name}") > _runner_layer(here)]
    assert not wrong, wrong
    assert {p.name for p in (REPO_ROOT / "runners").iterdir() if p.suffix == ".py"} == {
        "__init__.py", "cli.py", "package.py", "settings.py"}, "a module outside the folders"


SERVICE_ROOMS = ("records", "people", "notices", "packages", "lti", "grades", "fleet", "intake", "by_hand")
"""server/services/ from the bottom up (docs/contributors/architecture.md, "The server's
services"): a service imports only from its own room or the rooms below it."""


def _service_room(module: str) -> int:
    """The room of `server.services.<room>...`; -1 for the package itself (MAX_ROW_ID)."""
    parts = module.split(".")
    if len(parts) < 3:
        return -1
    assert parts[2] in SERVICE_ROOMS, f"{module}: server/services/{parts[2]} is in no room"
    return SERVICE_ROOMS.index(parts[2])


def test_service_rooms_depend_one_way() -> None:
    """A reader following a service's import never climbs to a room above its own; no module
    sits outside the rooms."""
    services = REPO_ROOT / "server" / "services"
    wrong = []
    for path in services.rglob("*.py"):
        here = module_name(path)
        for node in ast.walk(ast.parse(path.read_text())):
            names: list[str] = []
            if isinstance(node, ast.ImportFrom) and node.module == "server.services":
                names = [f"server.services.{a.name}" for a in node.names if a.name != "MAX_ROW_ID"]
            elif isinstance(node, ast.ImportFrom) and node.module and \
                    node.module.startswith("server.services."):
                names = [node.module]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names if a.name.startswith("server.services.")]
            wrong += [f"{here} imports {n}" for n in names
                      if _service_room(n) > _service_room(here)]
    assert not wrong, wrong
    assert {p.name for p in services.iterdir() if p.suffix == ".py"} == {"__init__.py"}, \
        "a service outside the rooms"
    assert {p.name for p in services.iterdir() if p.is_dir() and p.name != "__pycache__"} == \
        set(SERVICE_ROOMS)


def test_the_architecture_index_names_every_service_in_its_room() -> None:
    """architecture.md lists each room and its modules; the list is checked against the tree,
    so it cannot go stale."""
    import re

    text = (REPO_ROOT / "docs/contributors/architecture.md").read_text()
    section = text[text.index("**The server's services**"):]
    section = section[:section.index("\n\n")]
    listed = {m.group(1): set(re.findall(r"`([a-z_]+)`", m.group(2)))
              for m in re.finditer(r"^- `([a-z_]+)/`:(.*)$", section, re.M)}
    services = REPO_ROOT / "server" / "services"
    tree = {room: {p.stem for p in (services / room).glob("*.py") if p.stem != "__init__"}
            for room in SERVICE_ROOMS}
    assert list(listed) == list(SERVICE_ROOMS), list(listed)
    assert listed == tree, {r: listed[r] ^ tree[r] for r in tree if listed.get(r) != tree[r]}


def test_server_imports_only_the_protocol_from_runners() -> None:
    for path, names in imports_of(REPO_ROOT / "server").items():
        bad = {n for n in names if n.startswith("runners")
               and n != "runners.protocol" and not n.startswith("runners.protocol.")}
        assert not bad, f"{path} imports {bad}"


@pytest.mark.parametrize("package", PACKAGES)
def test_no_import_circles(package: str) -> None:
    """Each package's modules import one another without a circle (a DAG), lazy imports inside
    functions included: a circle broken only by importing late still ties its modules into one.
    Imports under `if TYPE_CHECKING:` are left out (annotations only, never run)."""
    graph = import_graph(package)
    problems = []
    for group in circles(graph):
        edges = [f"{a}:{graph[a][b]} -> {b}" for a in group for b in graph[a] if b in group]
        problems.append(f"{', '.join(group)} import one another: {'; '.join(edges)}")
    assert not problems, "\n".join(problems)


def test_modules_stay_readable() -> None:
    too_long = []
    for path in sorted(REPO_ROOT.rglob("*.py")):
        rel = path.relative_to(REPO_ROOT)
        if rel.parts[0] in NOT_MODULE_FOLDERS or any(p.startswith(".") for p in rel.parts):
            continue
        lines = len(path.read_text().splitlines())
        if lines > MODULE_LINES_MAX:
            too_long.append(f"{rel}: {lines} lines")
    assert not too_long, f"over {MODULE_LINES_MAX} lines: split by concept: {too_long}"


def test_only_settings_reads_the_environment() -> None:
    for path in (REPO_ROOT / "runners").rglob("*.py"):
        if path.name == "settings.py" or "harness" in path.parts:
            continue
        text = path.read_text()
        assert "os.environ.get(" not in text and "os.getenv(" not in text, path


def test_harness_needs_only_the_standard_library() -> None:
    harness = REPO_ROOT / "runners" / "harness" / "worker.py"
    top = {n.split(".")[0] for n in imports_of(harness.parent)[harness]}
    assert top <= {"__future__", "argparse", "base64", "importlib", "json", "math", "mmap", "os",
                   "signal", "socket",
                   "struct", "sys", "traceback", "typing", "mpi4py", "numpy"}


def test_every_module_run_concurrently_exists() -> None:
    """A renamed test module would silently leave the concurrent part of the suite."""
    from tests.conftest import CONCURRENT

    assert not [m for m in CONCURRENT if not (REPO_ROOT / m).is_file()]


def test_a_command_loads_only_what_it_runs() -> None:
    """Every `paragrade` command (a student's `submit`, a runner's start, a pilot's) loads the
    whole command line first: the server's database, broker and backup modules load in the
    commands that use them (0.9 s of every start until 2026-12-07), and a runner loads
    copydetect (matplotlib's pyplot, 0.4 s) only for a similarity job."""
    import subprocess
    import sys

    heavy = ("alembic", "celery", "sqlalchemy", "server.models", "server.backup", "matplotlib",
             "copydetect")
    probe = ("import sys, importlib; importlib.import_module(sys.argv[1]); "
             "print(' '.join(m for m in sys.argv[2:] if m in sys.modules))")
    loaded = {module: subprocess.run([sys.executable, "-c", probe, module, *heavy],
                                     capture_output=True, text=True, check=True,
                                     cwd=REPO_ROOT).stdout.split()
              for module in ("paragrade.cli", "runners.fleet.runner")}
    assert loaded["paragrade.cli"] == [], loaded
    # (a runner needs Celery and SQLAlchemy's broker transport; server/ it never imports, above)
    assert not {"matplotlib", "copydetect"} & set(loaded["runners.fleet.runner"]), loaded
