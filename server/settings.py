"""Server settings: the one place the server reads its environment (PARAGRADE_SERVER_*)."""

from __future__ import annotations

import ipaddress
import os
import secrets
import tomllib
from functools import lru_cache
from pathlib import Path
from typing import Literal

from pydantic import Field, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

REPO_ROOT = Path(__file__).resolve().parent.parent
DEV_SECRET = "dev-only-not-secret"
# Secrets anyone can read (the README, this file, the tests): never good enough beyond loopback.
KNOWN_SECRETS = frozenset({DEV_SECRET, "runner-secret-1234"})
SECRET_NAMES = ("secret_key", "runner_token")
OPTIONAL_SECRETS = ("runner_token",)  # off when unset outside development


class ServerSettings(BaseSettings):
    """The server's whole configuration; secrets have no default outside development."""

    model_config = SettingsConfigDict(env_prefix="PARAGRADE_SERVER_", extra="ignore")

    environment: Literal["development", "production"] = "development"
    database_url: str = Field(default=f"sqlite:///{REPO_ROOT / 'var' / 'paragrade.db'}")
    artifacts_dir: Path = Field(default=REPO_ROOT / "var" / "artifacts")
    secret_key: str = DEV_SECRET
    runner_token: str | None = Field(
        default=DEV_SECRET,
        description="The fleet token: one secret any runner may present (how `paragrade serve` "
                    "hands its local runner a secret). Outside development it is off unless "
                    "set: production runners present their own credentials (`paragrade admin "
                    "runner add`); empty: off")
    secrets_file: Path = Field(
        default=REPO_ROOT / "var" / "secrets.toml",
        description="Development only: where `paragrade serve` keeps the secret key and runner "
                    "token it generated on its first start (mode 0600)")
    public_url: str = "http://127.0.0.1:8000"
    assignments_dir: Path = Field(default=REPO_ROOT / "assignments")
    guide_dir: Path = Field(default=REPO_ROOT / "site",
                            description="The built guide (`mkdocs build`, run by the set-up), served "
                                        "at /guide/ and linked from every page when it is there")
    max_upload_bytes: int = 1024 * 1024
    max_package_bytes: int = 20 * 1024 * 1024
    max_unzipped_bytes: int = 8 * 1024 * 1024
    max_job_attempts: int = 3
    broker_url: str = Field(
        default=f"sqla+sqlite:///{REPO_ROOT / 'var' / 'broker.sqlite'}",
        description="Celery broker: redis://HOST:6379/0 in production; the default is an "
                    "embedded SQLite broker (no server) for one machine")
    broker_key_prefix: str = Field(default="", description="Redis key prefix (one per deployment)")
    job_lease_s: int = Field(default=60, ge=3, description="A claimed job whose runner has not "
                             "reported for this long is re-queued")
    retime_after_s: int = Field(default=600, ge=0, description="A grading whose speedup was "
                                "measured while the node was short of cores is graded again this "
                                "long after it finished: once, or, where its performance points "
                                "wait for a free node, up to 6 times (0: never)")
    final_runs: bool = Field(default=True, description="Once an assignment's last deadline "
                             "(extensions included) has passed, its final run starts by itself "
                             "(services/grades/finals.py); instructors can always start one")
    local_server_nice: int = Field(default=10, ge=0, le=19, description="With a local runner "
                                   "(the one-command start), the server process lowers its CPU "
                                   "priority by this much (nice) after starting the runner, so "
                                   "that its requests take what the sandboxes leave (0: as "
                                   "the runner)")
    final_busy_wait_s: int = Field(default=7200, ge=0, le=14 * 86400, description="A final "
                                   "run's turns timed on a busy node are timed again, in later "
                                   "rounds, for at most this long after the run starts; then the "
                                   "students still short of clean turns keep their live points, "
                                   "marked 'final run: node busy' (0: no second try)")
    backup_key: str | None = Field(
        default=None, min_length=32,
        description="Signs backups (HMAC-SHA256 of the manifest, which holds the database "
                    "file's checksum, and through it every artifact's): set, `admin backup` "
                    "signs, and `restore` and `--verify` refuse a backup unsigned or signed "
                    "with another key. Keep it with the other secrets, never with the backups "
                    "(≥ 32 characters; unset: backups are checked for integrity only)")
    backup_passphrase: str | None = Field(
        default=None, description="Seals and opens `admin backup --encrypt` backups where set "
                    "(cron); else the command asks for it. Never on a command line")
    metrics_token: str | None = Field(
        default=None,
        description="Outside development, /metrics answers only a request with "
                    "`Authorization: Bearer <this token>` (≥ 16 characters; unset: /metrics is "
                    "closed). In development it is open, as every route is to the machine")
    lti_launch_slots: int = Field(default=8, ge=1, le=256, description="LTI launches served at "
                                  "once, on worker threads of their own (a launch may wait "
                                  "seconds on an LMS's key set)")
    lti_launch_queue: int = Field(default=64, ge=0, le=10_000, description="Launches that may "
                                  "wait for a slot; beyond them a launch is answered 503 with "
                                  "Retry-After")
    lti_trusted_email_domains: dict[str, list[str]] = Field(
        default_factory=dict,
        description="JSON: an LMS's key set URL → the email domains the operator trusts it to "
                    "assert (its university's own). Only there does a launch give its account the "
                    "asserted email, or sign in to the account that has it. Elsewhere (the "
                    "default: every LMS) an LMS identity gets an account of its own whose "
                    "email no one can register, the asserted one kept beside it unverified "
                    "(docs/security.md, 'What an LMS may assert')")
    runner_live_s: int = Field(default=45, ge=3, description="A runner counts as live this long "
                               "after its last heartbeat")
    token_ttl_days: float = Field(default=30, gt=0, description="Bearer tokens (CLI and browser "
                                  "sessions) expire this long after they were issued")
    login_window_s: int = Field(default=900, ge=1, description="Failed logins count this long")
    login_failures_per_account: int = Field(
        default=5, ge=1, description="Failed logins one address may make for one account within "
                                     "the window before it must wait")
    login_failures_per_address: int = Field(
        default=100, ge=1, description="Failed logins one address may make for all accounts "
                                       "within the window (loose: a lab's NAT is one address)")

    login_account_free_failures: int = Field(
        default=10, ge=1, description="Checked wrong passwords one account may get from all "
                                      "addresses within the window before each further guess "
                                      "waits (1 s, doubling)")
    login_account_delay_max_s: int = Field(
        default=60, ge=1, description="The longest such wait: the owner of an account under "
                                      "attack waits at most this long to log in")
    outbound_budget_s: float = Field(
        default=10, gt=0, le=120, description="The whole time a request the server makes on "
                                              "someone's behalf (an LMS's key set, token, scores) "
                                              "may take, connect to last byte")
    outbound_max_bytes: int = Field(default=1 << 20, ge=1024,
                                    description="The largest answer such a request may get")
    outbound_private_networks: bool = Field(
        default=False, description="Outside development: whether an LMS registration that asks "
                                   "for it may reach loopback and private addresses (an LMS on "
                                   "the campus network); in development the registration's own "
                                   "setting decides")
    trusted_proxies: list[str] = Field(
        default_factory=list,
        description="Addresses of reverse proxies whose X-Forwarded-For / X-Forwarded-Proto "
                    "name the real client (JSON list, e.g. [\"10.0.0.5\"]); none by default: "
                    "the login throttle then counts the connecting address")

    smtp_host: str | None = Field(default=None, description="The mail server e-mail "
                                  "notifications go through; unset (the default): no e-mail "
                                  "is sent, the notifications stay in the page")
    smtp_port: int = Field(default=587, ge=1, le=65535)
    smtp_security: Literal["starttls", "tls", "none"] = Field(
        default="starttls", description="starttls (port 587), tls (SMTPS, port 465) or none "
                                        "(a relay on this machine or network only)")
    smtp_username: str | None = Field(default=None, description="Where the server wants a login")
    smtp_password: str | None = Field(default=None, description="Its password (a secret: the "
                                      "environment or the secrets file, never a default)")
    mail_from: str | None = Field(default=None, description="The sender's address (default: "
                                  "paragrade@ the public URL's host)")
    smtp_timeout_s: float = Field(default=20, gt=0, le=300)
    mail_poll_s: float = Field(default=5, gt=0, le=3600, description="How often the outbox is "
                               "looked at for messages to send")

    @model_validator(mode="after")
    def _no_default_secrets(self) -> ServerSettings:
        if self.runner_token == "" or (self.environment != "development"
                                       and "runner_token" not in self.model_fields_set):
            self.runner_token = None  # no fleet token: runners present their own credentials
        if self.metrics_token == "":
            self.metrics_token = None  # compose passes an unset variable as ""
        if self.environment != "development":
            for name in SECRET_NAMES:
                value = getattr(self, name)
                if value is None and name in OPTIONAL_SECRETS:
                    continue
                if value in KNOWN_SECRETS or len(value or "") < 16:
                    raise ValueError(f"PARAGRADE_SERVER_{name.upper()} must be set (≥ 16 chars) "
                                     "outside development")
            if self.metrics_token is not None and (self.metrics_token in KNOWN_SECRETS
                                                   or len(self.metrics_token) < 16):
                raise ValueError("PARAGRADE_SERVER_METRICS_TOKEN must have ≥ 16 characters")
        return self


def with_local_secrets(settings: ServerSettings) -> ServerSettings:
    """Development settings whose default secrets are replaced by this installation's own.

    The first call generates a random secret key and runner token into `secrets_file`, created
    with mode 0600 in a 0700 folder (never chmod-ed after: no moment where another user could
    read it); later calls reuse them, so browser sessions and a running runner survive a restart.
    A secret set in the environment (or given) is kept, even a known one: `serve` then refuses to
    listen beyond loopback. Production settings are returned as they are (no defaults there).
    """
    if settings.environment != "development":
        return settings
    defaults = [name for name in SECRET_NAMES if name not in settings.model_fields_set]
    if not defaults:
        return settings
    stored = _read_or_create_secrets(settings.secrets_file)
    return settings.model_copy(update={name: stored[name] for name in defaults})


class UnsafeSecrets(ValueError):
    """The secrets file is readable by others, or malformed."""


def _read_or_create_secrets(path: Path) -> dict[str, str]:
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    # The default database and uploads (students' code) live in this folder too: closed to
    # other users of the machine, also when an earlier version made it world-readable.
    if path.parent.stat().st_mode & 0o077 and path.parent.stat().st_uid == os.getuid():
        path.parent.chmod(0o700)
    fresh = {name: secrets.token_urlsafe(32) for name in SECRET_NAMES}
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    except FileExistsError:
        pass
    else:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write("# Generated by `paragrade serve` on its first start; keep it private.\n")
            fh.writelines(f'{name} = "{value}"\n' for name, value in fresh.items())
        return fresh
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    with os.fdopen(fd, "rb") as fh:
        st = os.fstat(fh.fileno())
        if st.st_mode & 0o077 or st.st_uid != os.getuid():
            raise UnsafeSecrets(f"{path} must belong to you and be readable by you alone "
                                f"(chmod 600 {path}, or delete it to make new secrets)")
        try:
            data = tomllib.load(fh)
        except tomllib.TOMLDecodeError as exc:
            raise UnsafeSecrets(f"{path} is not valid TOML ({exc}): delete it to make new "
                                "secrets") from exc
    if not all(isinstance(data.get(n), str) and len(data[n]) >= 16 for n in SECRET_NAMES):
        raise UnsafeSecrets(f"{path} lacks {' or '.join(SECRET_NAMES)} (≥ 16 characters): delete "
                            "it to make new secrets")
    return {name: str(data[name]) for name in SECRET_NAMES}


def is_loopback(host: str) -> bool:
    """Whether a listen address reaches this machine only ('localhost', 127.0.0.0/8, ::1)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False  # a host name: it may resolve to any interface


def public_secret_problems(settings: ServerSettings) -> list[str]:
    """The secrets that anyone could know (documented defaults, too short)."""
    return [f"PARAGRADE_SERVER_{name.upper()}" for name in SECRET_NAMES
            if getattr(settings, name) is not None
            and (getattr(settings, name) in KNOWN_SECRETS or len(getattr(settings, name)) < 16)]


@lru_cache
def get_settings() -> ServerSettings:
    return ServerSettings()
