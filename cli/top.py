"""`nucleus top`: RED per service and method, and the SearchAndRank stages, live in the terminal,
from the services' own /metrics (for the operator without Grafana).

    nucleus top [--interval 2] [--once] [--data-dir D]

Every `--interval` seconds each service's /metrics is read (with the stack's scrape token when
authentication is on: <data dir>/identity/metrics-scrape.token); rates and latency quantiles
are computed over the last interval from the counters and histogram buckets, as Prometheus'
`rate()` and `histogram_quantile()` would. `--once`: two reads one interval apart, one table,
exit (for scripts).
"""
from __future__ import annotations

import argparse
import math
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
from prometheus_client.parser import text_string_to_metric_families
from rich.console import Group
from rich.live import Live
from rich.table import Table

from cli.identity import identity_dir
from cli.stack import console, stack_state, tls_ca
from shared.auth.service_identity import scrape_token_file
from shared.errors import InvalidArgument
from shared.telemetry.rpc import SERVER_ERROR_CODES

SERVICES = ("rag_pipeline", "knowledge_store", "llm_orchestration")
SERVER_ERRORS = frozenset(code.name for code in SERVER_ERROR_CODES)    # the codes a server span errs on


@dataclass
class Sample:
    """One read of one service's /metrics: counters and histogram buckets by label set."""

    at: float
    requests: dict[tuple[str, str, str], float] = field(default_factory=dict)          # (transport, method, code)
    request_buckets: dict[tuple[str, str], dict[float, float]] = field(default_factory=lambda: defaultdict(dict))
    stage_buckets: dict[str, dict[float, float]] = field(default_factory=lambda: defaultdict(dict))
    error: str = ""


def parse(text: str, at: float) -> Sample:
    sample = Sample(at)
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            labels = s.labels
            if s.name == "nucleus_requests_total":
                sample.requests[(labels["transport"], labels["method"], labels["code"])] = s.value
            elif s.name == "nucleus_request_duration_seconds_bucket":
                sample.request_buckets[(labels["transport"], labels["method"])][float(labels["le"])] = s.value
            elif s.name == "nucleus_stage_duration_seconds_bucket":
                sample.stage_buckets[labels["stage"]][float(labels["le"])] = s.value
    return sample


def quantile(q: float, before: dict[float, float], after: dict[float, float]) -> float:
    """histogram_quantile over the bucket increases between two reads (seconds; nan when none)."""
    bounds = sorted(after)
    counts = [after[b] - before.get(b, 0.0) for b in bounds]
    if not counts or counts[-1] <= 0:
        return math.nan
    rank = q * counts[-1]
    previous_bound, previous_count = 0.0, 0.0
    for bound, count in zip(bounds, counts):
        if count >= rank:
            if math.isinf(bound):
                return previous_bound
            if count == previous_count:
                return bound
            return previous_bound + (bound - previous_bound) * (rank - previous_count) / (count - previous_count)
        previous_bound, previous_count = bound, count
    return previous_bound


def _ms(seconds: float) -> str:
    return "–" if math.isnan(seconds) else f"{seconds * 1000:.1f}"


def render(before: dict[str, Sample], after: dict[str, Sample]) -> Group:
    red = Table(title="requests (last interval)", title_justify="left")
    for column in ("service", "transport", "method", "req/s", "errors/s", "p50 ms", "p95 ms"):
        red.add_column(column, justify="right" if column not in ("service", "transport", "method") else "left")
    stages = Table(title="stages", title_justify="left")
    for column in ("service", "stage", "per s", "p50 ms", "p95 ms"):
        stages.add_column(column, justify="right" if column not in ("service", "stage") else "left")
    for service in SERVICES:
        a, b = after.get(service), before.get(service)
        if a is None or b is None or a.error or b.error:
            red.add_row(service, "", (a.error if a else "") or "unreachable", "", "", "", "")
            continue
        seconds = max(1e-6, a.at - b.at)
        methods: dict[tuple[str, str], list[float]] = defaultdict(lambda: [0.0, 0.0])
        for (transport, method, code), value in a.requests.items():
            delta = value - b.requests.get((transport, method, code), 0.0)
            methods[(transport, method)][0] += delta
            if code in SERVER_ERRORS or (transport == "mcp" and code not in ("ok", "tool_error")):
                methods[(transport, method)][1] += delta
        for (transport, method), (count, errors) in sorted(methods.items()):
            if count <= 0:
                continue
            buckets_a = a.request_buckets.get((transport, method), {})
            buckets_b = b.request_buckets.get((transport, method), {})
            red.add_row(service, transport, method.rsplit("/", 1)[-1], f"{count / seconds:.1f}",
                        f"{errors / seconds:.2f}", _ms(quantile(0.5, buckets_b, buckets_a)),
                        _ms(quantile(0.95, buckets_b, buckets_a)))
        for stage, buckets_a in sorted(a.stage_buckets.items()):
            buckets_b = b.stage_buckets.get(stage, {})
            count = buckets_a.get(math.inf, 0.0) - buckets_b.get(math.inf, 0.0)
            if count > 0:
                stages.add_row(service, stage, f"{count / seconds:.1f}", _ms(quantile(0.5, buckets_b, buckets_a)),
                               _ms(quantile(0.95, buckets_b, buckets_a)))
    return Group(red, stages)


def read_all(urls: dict[str, str], headers: dict[str, str], client: httpx.Client) -> dict[str, Sample]:
    samples = {}
    for service, url in urls.items():
        at = time.monotonic()
        try:
            response = client.get(url, headers=headers)
            if response.status_code != 200:
                samples[service] = Sample(at, error=f"HTTP {response.status_code}")
                continue
            samples[service] = parse(response.text, at)
        except httpx.HTTPError as err:
            samples[service] = Sample(at, error=type(err).__name__)
    return samples


def metrics_urls(state: dict) -> dict[str, str]:
    return {name: entry["mcp"].removesuffix("/mcp") + "/metrics"
            for name, entry in state.get("services", {}).items() if entry.get("mcp")}


def scrape_headers(identity_dir: Path) -> dict[str, str]:
    token_file = scrape_token_file(identity_dir)
    return {"Authorization": f"Bearer {token_file.read_text().strip()}"} if token_file.exists() else {}


def run(state: dict, identity: Path, *, interval_s: float, once: bool, out: Any, verify: Any = True) -> int:
    urls = metrics_urls(state)
    headers = scrape_headers(identity)
    with httpx.Client(timeout=5, verify=verify) as client:
        before = read_all(urls, headers, client)
        if once:
            time.sleep(interval_s)
            out.print(render(before, read_all(urls, headers, client)))
            return 0
        try:
            with Live(render(before, before), console=out, refresh_per_second=1) as live:
                while True:
                    time.sleep(interval_s)
                    after = read_all(urls, headers, client)
                    live.update(render(before, after))
                    before = after
        except KeyboardInterrupt:
            return 0


def cmd_top(args: argparse.Namespace) -> int:
    if args.interval <= 0:
        raise InvalidArgument("--interval", f"must be > 0 seconds, got {args.interval}")
    ca = tls_ca(args)
    return run(stack_state(args), identity_dir(args), interval_s=args.interval, once=args.once, out=console,
               verify=str(ca) if ca else True)


def register(subparsers: Any) -> None:
    """Add `nucleus top` to the operator CLI (called by cli.main)."""
    p = subparsers.add_parser("top", help="live RED per service and method, and SearchAndRank stages, from /metrics")
    p.add_argument("--interval", type=float, default=2.0, help="seconds between reads (default 2)")
    p.add_argument("--once", action="store_true", help="two reads one interval apart, one table, exit")
    p.set_defaults(func=cmd_top)


__all__ = ["cmd_top", "metrics_urls", "parse", "quantile", "register", "render", "run"]
