"""TelemetrySettings (NUCLEUS_OTEL_*): what the standard OTEL_* variables do not cover.

The local trace files (on by default, so a trace can be read with `nucleus traces` and no
collector), their size bound, content capture (off by default) and the deployment
environment name.
"""
from __future__ import annotations

from pathlib import Path

from pydantic_settings import BaseSettings, SettingsConfigDict

from shared.settings import default_data_dir


class TelemetrySettings(BaseSettings):
    """NUCLEUS_OTEL_*: what the standard OTEL_* variables do not cover."""

    model_config = SettingsConfigDict(env_prefix="NUCLEUS_OTEL_", extra="ignore", frozen=True)

    environment: str = "local"              # deployment.environment(.name)
    capture_content: bool = False           # query / document text on spans (see shared.telemetry.content)
    trace_file: bool = True                 # local JSONL trace files, read by `nucleus traces`
    trace_dir: Path | None = None           # default <NUCLEUS_DATA_DIR>/traces
    trace_file_max_bytes: int = 16 * 1024 * 1024
    trace_file_backups: int = 2             # <service>.jsonl.1 … .N kept after rotation
    metrics_file: bool = True               # periodic JSONL metrics dump beside the traces
    metrics_file_interval_s: float = 60.0
    prometheus: bool = True                 # span-derived series on /metrics (off: scrape-time ones only;
                                            # the metrics-overhead benchmark's "off" arm)

    def resolved_trace_dir(self) -> Path:
        return self.trace_dir if self.trace_dir is not None else default_data_dir() / "traces"


__all__ = ["TelemetrySettings"]
