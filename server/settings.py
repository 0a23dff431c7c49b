"""Server settings: the one place the server reads its environment (PARAGRADE_SERVER_*)."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Literal

from pydantic import Field, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

REPO_ROOT = Path(__file__).resolve().parent.parent
DEV_SECRET = "dev-only-not-secret"


class ServerSettings(BaseSettings):
    """The server's whole configuration; secrets have no default outside development."""

    model_config = SettingsConfigDict(env_prefix="PARAGRADE_SERVER_", extra="ignore")

    environment: Literal["development", "production"] = "development"
    database_url: str = Field(default=f"sqlite:///{REPO_ROOT / 'var' / 'paragrade.db'}")
    artifacts_dir: Path = Field(default=REPO_ROOT / "var" / "artifacts")
    secret_key: str = DEV_SECRET
    runner_token: str = Field(default=DEV_SECRET, description="Shared secret runners present")
    public_url: str = "http://127.0.0.1:8000"
    assignments_dir: Path = Field(default=REPO_ROOT / "assignments")
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
    runner_live_s: int = Field(default=45, ge=3, description="A runner counts as live this long "
                               "after its last heartbeat")

    @model_validator(mode="after")
    def _no_default_secrets(self) -> ServerSettings:
        if self.environment != "development":
            for name in ("secret_key", "runner_token"):
                if getattr(self, name) == DEV_SECRET or len(getattr(self, name)) < 16:
                    raise ValueError(f"PARAGRADE_SERVER_{name.upper()} must be set (≥ 16 chars) "
                                     "outside development")
        return self


@lru_cache
def get_settings() -> ServerSettings:
    return ServerSettings()
