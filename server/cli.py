"""Server commands: `paragrade serve`, `paragrade admin create-instructor`, `paragrade admin
backup|restore|downgrade` (the fleet's: server/fleet_cli.py)."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console

from server.services.records.errors import DomainError
from server.settings import (
    ServerSettings,
    UnsafeSecrets,
    get_settings,
    is_loopback,
    public_secret_problems,
    with_local_secrets,
)

if TYPE_CHECKING:
    from sqlalchemy.orm import Session

# The database, broker and backup modules are imported by the commands that use them: every
# `paragrade` command loads this module (a runner, a student's `submit`), and they took 0.9 s
# of each start (tests/test_architecture.py keeps them out).
console = Console()
admin_app = typer.Typer(help="Administration.", no_args_is_help=True)


def prepare_database() -> None:
    from server import migrate

    settings = get_settings()
    if settings.database_url.startswith("sqlite:///"):
        Path(settings.database_url.removeprefix("sqlite:///")).parent.mkdir(parents=True,
                                                                         exist_ok=True)
    settings.artifacts_dir.mkdir(parents=True, exist_ok=True)
    migrate.upgrade(settings.database_url)


def database_session() -> Session:
    """A session on the settings' database, its schema brought up to date first."""
    from server.db import make_engine, session_factory

    prepare_database()
    return session_factory(make_engine(get_settings().database_url))()


def import_shipped_courses(settings: ServerSettings | None = None) -> list[str]:
    """Create each shipped course (owned by the first instructor) and import its packages, each
    course's first ones first (services/packages/shipped.py); `course/slug` of each package (one unchanged
    since the last start is not imported again)."""
    from server.dispatch import publishing_sessions
    from server.services.packages import shipped

    settings = settings or get_settings()
    sessions, _ = publishing_sessions(settings)
    done = shipped.import_all(sessions=sessions, root=settings.assignments_dir,
                              artifacts_root=settings.artifacts_dir)
    for problem in done.problems:
        console.print(f"[red]{problem}[/]", highlight=False)
    for slug, code in done.join_codes.items():
        console.print(f"course [bold]{slug}[/]: join code [bold]{code}[/]")
    return done.packages


def _settings_to_serve(host: str, runner: bool) -> ServerSettings:
    """The settings, refused (exit 2, said why) where serving them would be unsafe."""
    try:
        # Never the documented development secrets: anyone who read the README could then
        # claim jobs and post grades, or forge a session cookie.
        settings = with_local_secrets(get_settings())
    except UnsafeSecrets as exc:
        console.print(f"[red]error:[/] {exc}")
        raise typer.Exit(2) from exc
    if not is_loopback(host) and (public := public_secret_problems(settings)):
        console.print(f"[red]error:[/] refusing to listen on {host}: {', '.join(public)} "
                      "is a documented development secret (or shorter than 16 characters). "
                      "Unset it (a random one is then kept in "
                      f"{settings.secrets_file}) or set your own.")
        raise typer.Exit(2)
    if runner and settings.runner_token is None:
        console.print("[red]error:[/] the local runner needs the fleet token, which is off "
                      "(PARAGRADE_SERVER_RUNNER_TOKEN unset or empty): start with --no-runner "
                      "and start runners with their own credentials (paragrade admin runner "
                      "add NAME)")
        raise typer.Exit(2)
    if settings.environment != "development" and settings.runner_token is not None:
        console.print("[yellow]warning:[/] the shared fleet token "
                      "(PARAGRADE_SERVER_RUNNER_TOKEN) is accepted: any holder can serve any "
                      "queue. Give each runner its own credential (paragrade admin runner add "
                      "NAME --queues …) and unset it.")
    return settings


def _local_runner(settings: ServerSettings, url: str) -> subprocess.Popen[bytes]:
    """The development start's own runner, in a process group of its own."""
    # The token goes in the runner's environment as it is spawned: readable only by this
    # user (/proc/PID/environ), never on its command line (`ps` shows that to everyone).
    # The server's own settings stay here: a runner needs none of them.
    env = {k: v for k, v in os.environ.items() if not k.startswith("PARAGRADE_SERVER_")}
    assert settings.runner_token is not None  # _settings_to_serve refused a start without it
    env.update(PARAGRADE_RUNNER_SERVER=url, PARAGRADE_BROKER_URL=settings.broker_url,
               PARAGRADE_RUNNER_TOKEN=settings.runner_token)
    # It calibrates its cores once this server is up, not while it starts beside it (a fresh
    # clone's start stored core 1 at half core 0's rate that way).
    env.setdefault("PARAGRADE_WAIT_FOR_SERVER_S", "60")
    # GPU jobs wait for a GPU runner unless this machine has a GPU; without one, the GPU
    # tasks that can be simulated are graded here under the CUDA simulator (correctness
    # only) while no GPU runner is live. Two-node MPI jobs wait for a runner that holds
    # nodes unless this one can stand two in on this host.
    queues = "cpu,mpi,gpu" if Path("/dev/nvidia0").exists() else "cpu,mpi,gpusim"
    return subprocess.Popen([sys.executable, "-m", "paragrade.cli", "runner", "--queues", queues,
                             "--name", "local", "--stand-in-nodes"], env=env,
                            start_new_session=True)  # its own group, stopped with the server


def serve(host: Annotated[str, typer.Option()] = "127.0.0.1",
          port: Annotated[int, typer.Option()] = 8000,
          runner: Annotated[bool, typer.Option(help="also start a local runner")] = True,
          workers: Annotated[int, typer.Option(
              min=1, envvar="PARAGRADE_SERVER_WORKERS",
              help="server processes (one Python process uses one core at most)")] = 1) -> None:
    """Start the server (migrating the schema first) and a local runner."""
    settings = _settings_to_serve(host, runner)
    prepare_database()
    imported = import_shipped_courses()
    url = f"http://{host}:{port}"
    console.print(f"paragrade serving on [bold]{url}[/]  (API docs: {url}/docs)")
    if not imported:
        console.print("No instructor yet: create one (in another terminal) with [bold]"
                      "paragrade admin create-instructor EMAIL[/] (in a checkout: "
                      ".venv/bin/paragrade; in the compose stack: docker compose exec server "
                      "paragrade …); that imports the shipped courses and prints their join codes.")
    console.print(f"Open [bold]{url}[/] in a browser to log in, or from a terminal: "
                  f"[bold]paragrade login {url}[/]")
    procs = [_local_runner(settings, url)] if runner else []
    if runner and settings.local_server_nice:
        # The runner (spawned above) keeps the sandboxes' priority; this server, its SQLite
        # database and its workers yield to them: a deadline's uploads and pages take what the
        # timed calls leave, rather than cores the probes would find busy.
        os.nice(settings.local_server_nice)
    import uvicorn

    from server import reaper
    from server.dispatch import publishing_sessions
    from server.shutdown import RunnersFirst, stop_runners

    def stop_on_sigterm(signum: int, _frame: object) -> None:
        raise SystemExit(128 + signum)  # unwinds to the `finally` below, which stops the runner

    # uvicorn shuts down on SIGTERM, then raises it again under the handler found before it
    # started: the default one would end this process before its runner.
    signal.signal(signal.SIGTERM, stop_on_sigterm)

    from server.main import create_app

    stop = reaper.start(*publishing_sessions(settings), lease_s=settings.job_lease_s,
                        max_attempts=settings.max_job_attempts,
                        login_window_s=settings.login_window_s,
                        retime_after_s=settings.retime_after_s,
                        final_runs=settings.final_runs,
                        final_busy_wait_s=settings.final_busy_wait_s,
                        live_s=settings.runner_live_s)
    from server.services.notices import mail

    mail.start(publishing_sessions(settings)[0], settings, stop)  # none without a mail server
    try:
        if workers == 1:
            # The app is built here, over the settings with this installation's secrets.
            config = uvicorn.Config(create_app(settings), host=host, port=port,
                                    log_level="warning",
                                    proxy_headers=False)  # the app trusts the proxies settings name
            RunnersFirst(config, procs).run()
        else:
            serve_processes(host, port, workers)
    finally:
        stop.set()
        stop_runners(procs)  # at once where the server stopped them first
        console.print(f"paragrade stopped ({url}{' and its local runner' * bool(procs)})")


def _listening_socket(host: str, port: int) -> socket.socket:
    """The socket every server process accepts on. Made with IPPROTO_TCP on purpose: asyncio
    sets TCP_NODELAY only on connections accepted from such a socket. uvicorn's own `--workers`
    binds with protocol 0, which leaves Nagle on: every request then waits ≈ 40 ms for a
    delayed ACK."""
    family, kind, proto, _, address = socket.getaddrinfo(
        host, port, type=socket.SOCK_STREAM, proto=socket.IPPROTO_TCP)[0]
    sock = socket.socket(family, kind, proto)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(address)
    except OSError as exc:
        sock.close()
        console.print(f"[red]error:[/] cannot listen on {host}:{port}: {exc.strerror}")
        raise typer.Exit(2) from exc
    sock.listen(2048)
    sock.set_inheritable(True)
    return sock


def serve_processes(host: str, port: int, workers: int) -> None:
    """Serve with `workers` processes on one listening socket, under uvicorn's supervisor (it
    restarts a process that dies and stops them all on SIGINT/SIGTERM). Each process builds its
    own app (`server.main:served_app`); a leaderboard's cache is checked against the board's
    version in the database, so each process's copy is right. Metrics go through files
    (prometheus_client's multiprocess mode) so that a scrape counts every process."""
    import uvicorn
    from uvicorn.supervisors import Multiprocess

    given = os.environ.get("PROMETHEUS_MULTIPROC_DIR")
    metrics_dir = Path(given or tempfile.mkdtemp(prefix="paragrade-metrics-"))
    metrics_dir.mkdir(parents=True, exist_ok=True)
    for stale in metrics_dir.glob("*.db"):  # an earlier run's counts are not this one's
        stale.unlink()
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = str(metrics_dir)  # the processes inherit it
    sock = _listening_socket(host, port)
    config = uvicorn.Config("server.main:served_app", factory=True, workers=workers,
                            log_level="warning", proxy_headers=False)
    try:
        Multiprocess(config, sockets=[sock]).run()
    finally:
        sock.close()
        if not given:
            shutil.rmtree(metrics_dir, ignore_errors=True)


@admin_app.command("create-instructor")
def create_instructor(email: str, name: Annotated[str, typer.Option()] = "Instructor",
                      password: Annotated[str | None, typer.Option(
                          help="prompted when not given")] = None) -> None:
    """Create an instructor account (the first one owns the shipped course)."""
    # Asked before the database is prepared (seconds): what is typed ahead is not lost.
    while password is None or len(password) < 8:
        if password is not None:
            console.print("[red]error:[/] the password needs at least 8 characters")
            if not sys.stdin.isatty():
                raise typer.Exit(2)
        password = str(typer.prompt("password (≥ 8 characters)", hide_input=True,
                                    confirmation_prompt="the same password again"))
    from server.services.people import users as user_service

    with database_session() as session, session.begin():
        try:
            user_service.create(session=session, email=email, name=name, password=password,
                                is_instructor=True)
        except DomainError as exc:
            console.print(f"[red]error:[/] {exc.message}")
            raise typer.Exit(2) from exc
    console.print(f"instructor [bold]{email}[/] created")
    import_shipped_courses()  # the first instructor owns the shipped courses


def _passphrase(*, new: bool) -> str:
    """A backup's passphrase: the settings' (PARAGRADE_SERVER_BACKUP_PASSPHRASE, for cron), else
    asked (twice for a new one), never on the command line, which `ps` shows to everyone."""
    if (given := get_settings().backup_passphrase) is not None:
        return given
    return str(typer.prompt("backup passphrase", hide_input=True, confirmation_prompt=new))


def _sealed(src: Path) -> bool:
    from server import backup

    try:
        return backup.read_manifest(src).encrypted
    except backup.BackupError:
        return False  # the command itself says what is wrong with it


@admin_app.command("backup")
def backup_cmd(dest: Annotated[Path, typer.Argument(
        help="a new folder for the backup (tar it to move it)")],
               check: Annotated[bool, typer.Option(
                   "--verify", help="check the backup already at DEST instead")] = False,
               encrypt: Annotated[bool, typer.Option(
                   "--encrypt", help="seal it with a passphrase "
                   "($PARAGRADE_SERVER_BACKUP_PASSPHRASE, else asked)")] = False) -> None:
    """Back up the database and every artifact it names, while the server runs."""
    from server import backup

    settings = get_settings()
    try:
        if check:
            done = backup.verify(dest, settings.backup_key,
                                 _passphrase(new=False) if _sealed(dest) else None)
        else:
            done = backup.backup(url=settings.database_url, artifacts_dir=settings.artifacts_dir,
                                 dest=dest, key=settings.backup_key,
                                 passphrase=_passphrase(new=True) if encrypt else None)
    except backup.BackupError as exc:
        console.print(f"[red]error:[/] {exc}", highlight=False)
        raise typer.Exit(2) from exc
    console.print(f"{'checked' if check else 'backed up'} {done.database} (schema "
                  f"{done.revision}): {done.submissions} submissions, {done.artifacts} artifacts "
                  f"({done.artifact_bytes:,} bytes) {'in' if check else 'into'} {dest}"
                  f"{', signed' if settings.backup_key else ' (unsigned: no backup key)'}"
                  f"{', encrypted' if done.encrypted else ''}",
                  highlight=False)


@admin_app.command("restore")
def restore_cmd(src: Annotated[Path, typer.Argument(help="a folder `admin backup` made")]
                ) -> None:
    """Restore a backup into this install's empty database and artifacts folder, then bring
    the schema to this release's."""
    from server import backup

    settings = get_settings()
    try:
        done = backup.restore(src=src, url=settings.database_url,
                              artifacts_dir=settings.artifacts_dir, key=settings.backup_key,
                              passphrase=_passphrase(new=False) if _sealed(src) else None)
    except backup.BackupError as exc:
        console.print(f"[red]error:[/] {exc}", highlight=False)
        raise typer.Exit(2) from exc
    console.print(f"restored {done.submissions} submissions and {done.artifacts} artifacts "
                  f"from {src} (taken {done.created_at}, schema {done.revision}, now at this "
                  "release's)", highlight=False)


@admin_app.command("downgrade")
def downgrade_cmd(revision: Annotated[str, typer.Argument(
        help="the earlier release's schema revision, e.g. 0013")],
                  yes: Annotated[bool, typer.Option(
                      "--yes", help="I have a backup and the server is stopped")] = False) -> None:
    """Take the schema back to an earlier release's, to roll back (the server stopped): the
    rows stay, what later migrations added (their columns and tables) goes."""
    if not yes:
        console.print("[red]error:[/] a downgrade drops what later releases added: take a "
                      "backup (paragrade admin backup), stop the server, then add --yes",
                      highlight=False)
        raise typer.Exit(2)
    from server import migrate

    try:
        migrate.downgrade(get_settings().database_url, revision)
    except Exception as exc:  # Alembic's own errors name the revision it could not find
        console.print(f"[red]error:[/] {exc}", highlight=False)
        raise typer.Exit(2) from exc
    console.print(f"the schema is at {revision}: install that release and start it",
                  highlight=False)
