"""The fleet's commands: `paragrade admin runner add|list|revoke` (runners' own credentials) and
`paragrade admin scale` (pilots started as SLURM jobs)."""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from runners.protocol import QUEUES
from server.cli import console, database_session, prepare_database
from server.services.records.errors import DomainError
from server.settings import get_settings

runner_app = typer.Typer(help="Runners' own credentials: the production way runners join.",
                         no_args_is_help=True)


@runner_app.command("add")
def runner_add(name: Annotated[str, typer.Argument(help="the runner's name (its --name)")],
               queues: Annotated[str, typer.Option(
                   help="queues it may serve, e.g. cpu,mpi (a GPU node: gpu)")] = ",".join(QUEUES)
               ) -> None:
    """Issue a runner its own credential; the secret is printed once, only its hash is kept."""
    from server.services.fleet import runner_credentials

    with database_session() as session, session.begin():
        try:
            served = runner_credentials.parse_queues(queues)
            secret = runner_credentials.add(session=session, name=name, queues=served)
        except DomainError as exc:
            console.print(f"[red]error:[/] {exc.message}")
            raise typer.Exit(2) from exc
    console.print(f"runner [bold]{name}[/] may serve {', '.join(served)}. Its secret, shown "
                  "this once (keep it like a password; revoke the credential if it leaks):",
                  highlight=False)
    print(secret)  # alone on its line and unstyled, for a script to take
    console.print(f"On the runner: PARAGRADE_RUNNER_TOKEN=<the secret> paragrade runner --name "
                  f"{name} --queues {','.join(served)} …", highlight=False, soft_wrap=True)


@runner_app.command("list")
def runner_list() -> None:
    """Every runner credential: its queues, whether it is revoked, when its runner last said
    hello."""
    from server.services.fleet import runner_credentials

    with database_session() as session:
        rows = runner_credentials.listing(session=session)
    if not rows:
        console.print("no runner credentials (paragrade admin runner add NAME)")
        return
    table = Table("name", "queues", "issued", "state", "last seen")
    for r in rows:
        table.add_row(r.name, ",".join(r.queues), f"{r.created_at:%Y-%m-%d %H:%M}",
                      f"revoked {r.revoked_at:%Y-%m-%d %H:%M}" if r.revoked_at is not None
                      else "active" if r.expires_at is None
                      else f"pilot, ends {r.expires_at:%Y-%m-%d %H:%M}",
                      "never" if r.last_seen is None else f"{r.last_seen:%Y-%m-%d %H:%M:%S}")
    console.print(table)


@runner_app.command("revoke")
def runner_revoke(name: Annotated[str, typer.Argument(help="the runner's name")]) -> None:
    """Refuse a runner's credential from now on; the jobs it holds go back to their queues."""
    from server.dispatch import publishing_sessions
    from server.services.fleet import runner_credentials

    prepare_database()
    settings = get_settings()
    sessions, _ = publishing_sessions(settings)  # the jobs put back are published again
    with sessions() as session, session.begin():
        try:
            n = runner_credentials.revoke(session=session, name=name,
                                      max_attempts=settings.max_job_attempts)
        except DomainError as exc:
            console.print(f"[red]error:[/] {exc.message}")
            raise typer.Exit(2) from exc
    console.print(f"runner [bold]{name}[/]'s credential is revoked"
                  + (f"; {n} job{'s' if n != 1 else ''} it held went back to the queue"
                     if n else ""))


def scale(config: Annotated[Path, typer.Argument(help="the fleet's TOML file (docs/operators/"
                                                 "autoscaling.md)")],
          once: Annotated[bool, typer.Option("--once", help="one pass, then exit")] = False
          ) -> None:
    """Keep each queue's runners at the size its queue needs: pilots started as SLURM batch jobs,
    each with a credential of its own that ends with its job."""
    import logging
    import time

    from server import pilots
    from server.dispatch import publishing_sessions
    from server.services.fleet import autoscaling

    try:
        policy = autoscaling.load_policy(config)
    except ValueError as exc:
        console.print(f"[red]error:[/] {exc}", highlight=False)
        raise typer.Exit(2) from exc
    prepare_database()
    settings = get_settings()
    server = policy.server or settings.public_url
    broker = policy.broker or settings.broker_url
    if not broker or broker.startswith("sqla+sqlite"):
        console.print("[red]error:[/] pilots on other nodes need a broker they can reach: set "
                      "`broker` in the file (redis://…) or PARAGRADE_SERVER_BROKER_URL")
        raise typer.Exit(2)
    try:
        provider = pilots.SlurmPilots(policy, server=server, broker=broker)
    except autoscaling.PilotError as exc:
        console.print(f"[red]error:[/] {exc}", highlight=False)
        raise typer.Exit(2) from exc
    logging.basicConfig(level=logging.INFO, format="%(asctime)s scaler %(message)s")
    sessions, _ = publishing_sessions(settings)  # jobs a gone pilot held are published again
    scaler = autoscaling.Scaler(policy=policy, provider=provider)
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(True))
    while not stop:
        try:
            with sessions() as session:
                for row in scaler.step(session=session, live_s=settings.runner_live_s,
                                       max_attempts=settings.max_job_attempts):
                    logging.info("%s: %d desired, %d waiting for a node, %d running: %s",
                                 row.queue, row.desired, row.pending, row.running, row.reason)
        except autoscaling.PilotError as exc:  # squeue down for a moment: the next pass tries again
            logging.warning("%s", exc)
        if once:
            break
        time.sleep(policy.every_s)
