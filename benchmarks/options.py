"""What one `nucleus bench` run is asked to do (BenchOptions, checked by `validate`) and the
record of one tenant's run (TenantRun): below both the harness that runs the phases and the
result it assembles (result.py), so neither imports the other."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from benchmarks.queries import QueryRecord
from benchmarks.tenants import TenantPlan
from shared.errors import InvalidArgument

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_CACHE = ROOT / ".bench-cache"
DEFAULT_OUT = ROOT / "benchmarks" / "out"


@dataclass
class BenchOptions:
    datasets: list[Path]
    tenants: list[str]
    split: str = "test"
    tenant_slices: int = 1
    use_running: bool = False
    running_data_dir: Path | None = None        # with use_running: the `nucleus up` data dir
    cache_dir: Path = DEFAULT_CACHE
    stack_dir: Path | None = None               # own stack data; default <cache_dir>/stack-data
    out_dir: Path | None = None                 # default benchmarks/out/<timestamp>
    top_k_initial: int = 200
    top_k_final: int = 100
    dense_weights: tuple[float, ...] = (0.3, 0.5, 0.7)
    concurrency: tuple[int, ...] = (1, 4, 16)
    throughput_queries: int = 20                # per client
    max_queries: int = 0                        # per tenant; 0 = every judged query
    ingest_batch: int = 64
    force_ingest: bool = False
    timeout_s: float = 30.0
    embed_timeout_s: float = 0.0      # the query embedding's deadline asked of the server (0: its own)
    warmup: int = 5                             # synthetic warm-up queries per tenant and method
    query_cache: bool = False                   # own stack: keep LlmOrchestration's query-embedding cache
    baseline: bool = True
    baseline_alpha: float = 0.5
    plots: bool = True
    needle_tokens: int = 200                    # per tenant (benchmarks/needles.py)
    needle_phrases: int = 100
    completion_queries: int = 200               # 0 = skip the completion-cost measurement
    completion_top_k: int = 50                  # agent-sized: the service default top_k_initial
    query_split: Path | None = None             # default benchmarks/splits/<dataset>-<split>.json
    fail_on_targets: bool = False

    def validate(self) -> None:
        if not self.datasets:
            raise InvalidArgument("--dataset", "at least one BEIR dataset directory is required")
        if len(self.tenants) != len(self.datasets):
            raise InvalidArgument("--tenant", f"{len(self.tenants)} tenants for {len(self.datasets)} datasets; "
                                              "give one --tenant per --dataset, in the same order")
        if not 1 <= self.top_k_final <= 100:
            raise InvalidArgument("--top-k-final", f"must be in 1..100 (the service maximum), got {self.top_k_final}")
        if self.top_k_initial < self.top_k_final:
            raise InvalidArgument("--top-k-initial", f"must be >= --top-k-final ({self.top_k_final}), "
                                                     f"got {self.top_k_initial}")
        for w in self.dense_weights:
            if not 0.0 <= w <= 1.0:
                raise InvalidArgument("--dense-weights", f"each weight must be in [0, 1], got {w}")
        if any(c < 1 for c in self.concurrency):
            raise InvalidArgument("--concurrency", f"client counts must be >= 1, got {list(self.concurrency)}")
        for name in ("throughput_queries", "ingest_batch"):
            if getattr(self, name) < 1:
                raise InvalidArgument("--" + name.replace("_", "-"), f"must be >= 1, got {getattr(self, name)}")
        for name in ("needle_tokens", "needle_phrases", "completion_queries"):
            if getattr(self, name) < 0:
                raise InvalidArgument("--" + name.replace("_", "-"), f"must be >= 0, got {getattr(self, name)}")
        if self.completion_top_k < 1:
            raise InvalidArgument("--completion-top-k", f"must be >= 1, got {self.completion_top_k}")
        if self.max_queries < 0:
            raise InvalidArgument("--max-queries", f"must be >= 0 (0 = all), got {self.max_queries}")
        if self.use_running and self.running_data_dir is None:
            raise InvalidArgument("--use-running", "needs the running stack's data directory")


@dataclass
class TenantRun:
    plan: TenantPlan
    queries: list[tuple[str, str]]              # (qid, text) evaluated for this tenant
    records: dict[str, list[QueryRecord]] = field(default_factory=dict)   # method -> records
