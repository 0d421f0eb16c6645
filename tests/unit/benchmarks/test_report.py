"""The report writers on a result where everything went wrong: no successful query, no baseline."""
from __future__ import annotations

import io
import json
import math
from pathlib import Path

from rich.console import Console

from benchmarks.metrics import latency_summary
from benchmarks.report import markdown, print_summary, write_all


def _failed_result() -> dict:
    empty = latency_summary([])
    return {
        "run": {"started": "2026-01-01 00:00:00", "git": "", "host": {"cpus": 2, "loadavg_1m": {"start": 1.0}},
                "options": {"top_k_initial": 200, "top_k_final": 100}},
        "datasets": [{"name": "d", "documents": 3, "judged_queries": 1, "split": "test"}],
        "stack": {"started_here": False, "data_dir": "/x", "query_embedding_cache": "unknown"},
        "methods": [{"name": "default", "profile": "", "description": "as shipped"}],
        "quality": {"t": {"default": {"ndcg@10": 0.0, "recall@100": 0.0, "mrr@10": 0.0, "queries": 1,
                                      "errors": 1, "degraded": 0, "e2e_p50_ms": math.nan}}},
        "latency": {"method": "default", "stages": {}, "e2e_client": empty, "by_method": {"default": empty}},
        "throughput": [{"clients": 1, "queries_per_client": 2, "completed": 0, "errors": 2,
                        "error_kinds": {"unavailable": 2}, "wall_s": 0.1, "qps": 0.0, "latency": empty}],
        "ingest": [{"tenant": "t", "documents": 3, "ingested_now": 0, "skipped": 3, "seconds": 0.0,
                    "docs_per_s": None, "measured_now": False, "entries": 0, "embed_seconds": 0.0,
                    "commit_seconds": 0.0, "tenant_artifacts": 3, "tenant_entries": 3, "warnings": ["w"]}],
        "isolation": {"tenants": 1, "responses_checked": 0, "results_checked": 0, "foreign_results": 0,
                      "violations": 0, "examples": []},
        "baseline": None,
        "ratios": None,
    }


def test_a_run_without_successful_queries_still_reports(tmp_path: Path) -> None:
    result = _failed_result()
    records = [{"tenant": "t", "method": "default", "query_id": "q", "doc_ids": [], "e2e_ms": 3.0,
                "stages_ms": {}, "error": "unavailable: down", "degraded": False}]
    paths = write_all(result, records, tmp_path / "out")
    stored = json.loads(paths["json"].read_text())          # strict JSON: NaN became null
    assert stored["latency"]["e2e_client"]["p50"] is None
    assert "unavailable 2" in paths["markdown"].read_text()
    assert json.loads(paths["queries"].read_text().splitlines()[0])["error"] == "unavailable: down"
    assert paths["plot_throughput"].is_file()
    text = io.StringIO()
    print_summary(result, Console(file=text, width=140))
    assert "0 violations" in text.getvalue()


def test_markdown_marks_missing_numbers_and_earlier_ingest_rates() -> None:
    text = markdown(_failed_result(), {})
    assert "| default | 0.000 | 0.000 | 0.000 | – | 1 | 1 | 0 | – |" in text
    assert "– (earlier run)" in text and "- `t`: w" in text
    assert "**Violations**" in text
