"""Entry point: the engine's commands plus the server's and the client's."""

from __future__ import annotations

from paragrade import client
from paragrade.teams import team_app
from runners.cli import app
from server.cli import admin_app, serve
from server.fleet_cli import runner_app, scale

admin_app.add_typer(runner_app, name="runner")
admin_app.command("scale")(scale)
app.command()(serve)
app.add_typer(admin_app, name="admin")
client.add_commands(app)
app.add_typer(team_app, name="team")

if __name__ == "__main__":
    app()
