"""Settings from the environment (prefix ``ADVISOR_``), built by the CLI or ``create_app``, never at
import time, so tests inject their own."""

from __future__ import annotations

from pathlib import Path

from platformdirs import user_cache_dir, user_data_dir
from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

__all__ = ["Settings", "default_db_url"]

APP_NAME = "slo-advisor"


def default_db_url() -> str:
    """A SQLite file in the user data dir: embedded, nothing to start."""
    path = Path(user_data_dir(APP_NAME)) / "advisor.db"
    return f"sqlite:///{path}"


class Settings(BaseSettings):
    """Runtime settings. Every field can be set as ``ADVISOR_<FIELD>`` in the environment."""

    model_config = SettingsConfigDict(env_prefix="ADVISOR_", extra="ignore")

    db_url: str = Field(default_factory=default_db_url,
                        description="SQLAlchemy URL of the trial store and Optuna storage")
    cache_dir: Path = Field(default_factory=lambda: Path(user_cache_dir(APP_NAME)),
                            description="datasets, embeddings and built indexes")
    trial_timeout_s: float = Field(default=300.0, gt=0,
                                   description="a trial running longer is killed and failed")
    trial_memory_limit_mb: int | None = Field(
        default=None, gt=0, description="address-space limit of a trial's child process")
    heartbeat_interval_s: float = Field(default=10.0, gt=0)
    import_shipped: bool = Field(
        default=True, description="import the shipped knowledge (knowledge/data/*.jsonl) into the "
                                  "store when the CLI opens it, once per file content")
