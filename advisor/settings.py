"""Settings from the environment (prefix ``ADVISOR_``), built by the CLI or ``create_app``, never at
import time, so tests inject their own."""

from __future__ import annotations

from pathlib import Path

from platformdirs import user_cache_dir, user_data_dir
from pydantic import Field, SecretStr, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

__all__ = ["Settings", "check_paired_repeats", "default_db_url"]

APP_NAME = "slo-advisor"


def default_db_url() -> str:
    """A SQLite file in the user data dir: embedded, nothing to start."""
    path = Path(user_data_dir(APP_NAME)) / "advisor.db"
    return f"sqlite:///{path}"


def check_paired_repeats(value: int) -> int:
    """``value`` if it is a usable number of paired repeats (0, or 3 to 50), else ValueError:
    fewer than 3 repeats per arm support no comparison, so 1 and 2 would only cost trials."""
    if value != 0 and not 3 <= value <= 50:
        raise ValueError(f"`paired_repeats` must be 0 (off) or 3 to 50, but got {value}")
    return value


class Settings(BaseSettings):
    """Runtime settings. Every field can be set as ``ADVISOR_<FIELD>`` in the environment."""

    model_config = SettingsConfigDict(env_prefix="ADVISOR_", extra="ignore")

    db_url: str = Field(default_factory=default_db_url,
                        description="SQLAlchemy URL of the trial store and Optuna storage")
    cache_dir: Path = Field(default_factory=lambda: Path(user_cache_dir(APP_NAME)),
                            description="datasets, embeddings and built indexes")
    shared_model_dir: Path | None = Field(
        default=None, description="where the fitted models of a store holding exactly its "
                                  "imported files (a fresh store of the shipped knowledge) are "
                                  "shared with other such stores; default <cache_dir>/knowledge")
    trial_timeout_s: float = Field(default=300.0, gt=0,
                                   description="a trial running longer is killed and failed")
    trial_memory_limit_mb: int | None = Field(
        default=None, gt=0, description="resident-memory limit of a trial's process tree in MiB "
                                        "(polled; over it the trial is killed as oom)")
    heartbeat_interval_s: float = Field(default=10.0, gt=0)
    study_lease_ttl_s: float = Field(
        default=60.0, ge=2, le=3600,
        description="a driver holds its study's lease (one driver per study) and renews it "
                    "every quarter of this; another host may take the study over only after "
                    "this long without a renewal (on the same host a dead holder frees it "
                    "at once)")
    paired_repeats: int = Field(
        default=3, ge=0, le=50,
        description="after a study's search, measure its best config and the engine default "
                    "this many times each, interleaved, and store their paired comparison "
                    "(0: off; otherwise at least 3, the fewest a comparison is claimed from)")
    import_shipped: bool = Field(
        default=True, description="import the shipped knowledge (knowledge/data) into the "
                                  "store when the CLI opens it, once per file content")

    # REST service (`advisor serve`) -----------------------------------------------------------
    api_key: SecretStr | None = Field(
        default=None, description="API key(s) for mutating endpoints; several keys (rotation) "
                                  "are comma-separated. Unset: mutating endpoints are refused")
    api_key_file: Path | None = Field(
        default=None, description="file holding API keys, one per line ('#' comments allowed)")
    api_read_requires_key: bool = Field(
        default=False, description="also require the API key for read endpoints (GET /v1/...)")
    api_dev_loopback: bool = Field(
        default=False, description="development mode: with no key configured, accept mutating "
                                   "requests from 127.0.0.1/::1 only; `advisor serve` refuses it "
                                   "on any other bind address")
    api_cors_origins: list[str] = Field(
        default_factory=list, description="origins allowed by CORS (JSON list); empty: CORS off")
    api_max_body_bytes: int = Field(default=64 * 1024, gt=0,
                                    description="larger request bodies are refused with 413")
    api_refresh_interval_s: float = Field(
        default=2.0, ge=0, description="how often the service checks the store for new trials "
                                       "before refitting its models and cheat-sheet")
    api_rate_limit_rps: float | None = Field(
        default=None, gt=0, le=1e6,
        description="per-client rate limit of the service (token bucket per client address; "
                    "probes exempt; 429 with Retry-After when exceeded); unset: no limit")
    api_rate_limit_burst: int = Field(default=20, ge=1, le=100_000,
                                      description="requests a client may send at once before "
                                                  "the rate limit applies")
    worker_poll_interval_s: float = Field(default=1.0, gt=0,
                                          description="how often the worker looks for jobs")

    @field_validator("paired_repeats")
    @classmethod
    def _paired_repeats(cls, value: int) -> int:
        return check_paired_repeats(value)

    def api_keys(self) -> list[str]:
        """Every configured API key (from ``api_key`` and ``api_key_file``), blanks dropped."""
        keys: list[str] = []
        if self.api_key is not None:
            keys += [k.strip() for k in self.api_key.get_secret_value().split(",")]
        if self.api_key_file is not None:
            for line in self.api_key_file.read_text().splitlines():
                line = line.strip()
                if line and not line.startswith("#"):
                    keys.append(line)
        return [k for k in keys if k]
