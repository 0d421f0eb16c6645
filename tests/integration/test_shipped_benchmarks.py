"""Every shipped benchmark command's smallest case, run as a user runs it (a process of its own),
on a generated 50-document BEIR dataset (tests/support/beir_fixture.py), against the suite's
session stack where the command needs a stack (`--use-running`: no stack of its own), each in a
tenant of its own; each must print its figures.

    nucleus bench --use-running              quality, latency, throughput, isolation (no baseline)
    python -m benchmarks.federate --use-running --sources 2    the local stack and the foreign server
    python -m benchmarks.soak --use-running  a few seconds of load, every acknowledged write read back
    python -m benchmarks.big_file --use-running   a small parts list through nucleus ingest vs the model
    nucleus attack --use-running --families b     the principal matrix against the suite's secure stack
    python -m benchmarks.archive_speed --use-running   a tenant exported and imported through the stack
    python -m benchmarks.splits --out        in process
    python -m benchmarks.learned_ranking     in process (its model and vectors in a cache made here)
    python -m benchmarks.scale --no-grpc     in process (its gRPC part measures a KnowledgeStore it
                                             starts on the stores it writes, not a running stack)
"""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from tests.support.beir_fixture import write_beir
from tests.support.processes import ROOT, run_cli

pytestmark = [pytest.mark.integration]

NUMBER = r"(\d+(?:\.\d+)?)"


@pytest.fixture(scope="module")
def dataset(tmp_path_factory) -> Path:
    return write_beir(tmp_path_factory.mktemp("beir") / "tiny", docs=50, queries=12, seed=41)


def run_module(module: str, *args: str, cwd: Path = ROOT, env: dict[str, str] | None = None,
               timeout_s: float = 180.0) -> str:
    """`python -m MODULE ARGS` in a process of its own; its stdout, after checking it exited 0."""
    environment = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(ROOT), **(env or {})}
    done = subprocess.run([sys.executable, "-W", "ignore", "-m", module, *args], cwd=cwd, capture_output=True,
                          text=True, timeout=timeout_s, env=environment)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done.stdout


def figure(pattern: str, out: str) -> float:
    found = re.search(pattern, out)
    assert found, f"{pattern!r} not in:\n{out}"
    return float(found.group(1))


def test_nucleus_bench_on_the_running_stack_prints_quality_latency_and_isolation(dataset, stack_data_dir, stack,
                                                                                 tmp_path):
    done = run_cli(["--data-dir", str(stack_data_dir), "bench", "--use-running", "--dataset", str(dataset),
                    "--tenant", "shipped-bench", "--cache-dir", str(tmp_path / "cache"), "--out", str(tmp_path / "out"),
                    "--max-queries", "6", "--dense-weights", "0.5", "--concurrency", "1", "--throughput-queries", "3",
                    "--warmup", "0", "--needle-tokens", "4", "--needle-phrases", "2", "--completion-queries", "0",
                    "--top-k-initial", "20", "--top-k-final", "10", "--no-baseline", "--no-plots"], timeout_s=180)
    out = done.stdout
    assert done.returncode == 0, out[-3000:] + done.stderr[-3000:]
    assert "using the running stack in" in out
    table = (re.split(r"\s*[│┃]\s*", line.strip(" │┃")) for line in out.splitlines())
    rows = {cells[1]: cells for cells in table if cells[0] == "shipped-bench" and len(cells) == 7}
    assert {"default", "rrf", "keyword-only"} <= set(rows), out
    for method, (_, _, ndcg, recall, mrr, _, errors) in rows.items():
        assert 0.5 <= float(ndcg) <= 1.0 and 0.0 <= float(mrr) <= 1.0 and errors == "0", (method, out)
    assert figure(r"ingest shipped-bench: (\d+) documents", out) == 50
    assert figure(r"isolation: (\d+) violations over \d+", out) == 0
    assert figure(r"isolation: \d+ violations over (\d+)", out) > 0


def test_federate_on_the_running_stack_prints_each_ranking(dataset, stack_data_dir, stack, tmp_path):
    out = run_module("benchmarks.federate", "--use-running", "--data-dir", str(stack_data_dir), "--sources", "2",
                     "--dataset", str(dataset), "--queries", "6", "--docs", "0", "--federate-tenant", "shipped-fed",
                     "--cache-dir", str(tmp_path / "cache"), "--rescore-rounds", "1")
    assert figure(r"(\d+) queries, \d+ documents split over 2 sources", out) == 6
    for label in ("single index \\(default\\)", "unified \\(federation\\)", "RRF over sources",
                  "ceiling \\(what the sources returned\\)"):
        assert 0.3 <= figure(label + r"\s+" + NUMBER, out) <= 1.0, label
    assert figure(r"source failures (\d+)", out) == 0
    assert figure(r"federated SearchAndRank p50 " + NUMBER + " ms", out) > 0


def test_learned_ranking_cross_fits_on_the_split_splits_writes(dataset, tmp_path):
    split = tmp_path / "split.json"
    out = run_module("benchmarks.splits", "--dataset", str(dataset), "--out", str(split))
    assert figure(r"(\d+) tune", out) == 6 and figure(r"(\d+) heldout", out) == 6 and split.is_file()
    out = run_module("benchmarks.learned_ranking", "--dataset", str(dataset), "--query-split", str(split),
                     "--cache-dir", str(tmp_path / "cache"), "--settings", "trees N30")
    assert figure(r"index: (\d+) docs", out) == 50
    current = figure(r"2-fold cross-fit, all queries:\s+12 queries: current " + NUMBER, out)
    tuned = figure(r"2-fold cross-fit, all queries:\s+12 queries: current [\d.]+ tuned " + NUMBER, out)
    assert 0.3 <= current <= 1.0 and 0.0 <= tuned <= 1.0, out
    assert figure(r"p50 added per query at N=100 .*?: " + NUMBER + " ms", out) > 0


def test_scale_in_process_prints_recall_and_leg_latency(dataset, tmp_path):
    out = run_module("benchmarks.scale", "--sizes", "1000", "--small-tenants", "0", "--no-grpc", "--scale-queries",
                     "10", "--vectors", "isotropic", "--ef-sweep", "", "--dataset", str(dataset),
                     cwd=tmp_path)
    row = next((line for line in out.splitlines() if line.startswith("| 1,000 |")), None)
    assert row, out
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert 0.9 <= float(cells[3]) <= 1.0, row                       # recall@10 against exact search
    vector_p50, vector_p99 = (float(x) for x in cells[5].removesuffix(" ms").split(" / "))
    assert 0 < vector_p50 <= vector_p99, row


def test_a_short_soak_prints_its_rows_and_loses_no_write(dataset, stack_data_dir, stack):
    """`python -m benchmarks.soak` for a few seconds: a row per interval, every acknowledged write read back."""
    out = run_module("benchmarks.soak", "--use-running", "--data-dir", str(stack_data_dir), "--dataset", str(dataset),
                     "--docs", "30", "--tenant", "shipped-soak", "--seconds", "4", "--interval", "2", "--clients", "2",
                     "--seed", "3", timeout_s=120)
    rows = [line.split() for line in out.splitlines() if re.match(r"^\s+\d+\s+\d+\s+\d+\s+\d+\s", line)]
    assert len(rows) == 2 and all(len(r) == 15 for r in rows), out
    assert all(int(r[7]) > 0 and r[10] == "0" for r in rows), out           # searches answered, none failed
    counts = re.search(r"(\d+) acknowledged writes, (\d+) acknowledged deletes; read back (\d+) artifacts: "
                       r"(\d+) lost writes, (\d+) resurrected deletes", out)
    assert counts, out
    writes, _, read_back, lost, resurrected = map(int, counts.groups())
    assert writes > 0 and read_back > 0 and lost == 0 and resurrected == 0, out
    assert "PASS  lost writes == 0" in out and "PASS  errors == 0" in out


def test_a_parts_list_through_nucleus_ingest_against_the_model(stack_data_dir, stack, tmp_path):
    out = run_module("benchmarks.big_file", "--rows", "60", "--runs", "1", "--use-running", "--data-dir",
                     str(stack_data_dir), "--tenant", "shipped-big", "--cache-dir", str(tmp_path))
    chunks = figure(r"parts-60.xlsx: [\d.]+ MB, (\d+) chunks", out)
    assert chunks >= 2
    assert 0.0 < figure(r"median model ÷ ingest over 1 rounds: " + NUMBER, out) < 5.0


def test_nucleus_attack_on_the_running_secure_stack_passes_the_principal_matrix(secure_corpus):
    """`nucleus attack --use-running`: the suite's secure stack (started by the attack suite's own secure
    start, so its principals' credentials are in its data directory), the principal matrix alone."""
    done = run_cli(["--data-dir", str(secure_corpus.data_dir), "attack", "--use-running", "--families", "b"],
                   timeout_s=120)
    out = done.stdout
    assert done.returncode == 0, out[-3000:] + done.stderr[-3000:]
    assert f"attacking the running secure stack in {secure_corpus.data_dir}" in out, out
    assert figure(r"family \(b\)[^\n]*\n\s+(\d+) calls", out) > 50
    assert figure(r"(\d+) leaks, \d+ missed", out) == 0 and figure(r"(\d+) missed", out) == 0, out


def test_archive_speed_exports_and_imports_a_tenant_through_the_running_stack(stack_data_dir, stack, tmp_path):
    docs = tmp_path / "docs"
    docs.mkdir()
    for i in range(6):
        (docs / f"note-{i}.md").write_text(f"# Pump note {i}\n\nSeal {i} wears after {i * 100} hours; check valve {i}.\n")
    done = run_cli(["--data-dir", str(stack_data_dir), "ingest", str(docs), "--tenant", "shipped-archive"], timeout_s=120)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    out = run_module("benchmarks.archive_speed", "--use-running", "--data-dir", str(stack_data_dir),
                     "--tenant", "shipped-archive", timeout_s=120)
    entries = figure(r"tenant shipped-archive: (\d+) entries", out)
    assert entries >= 6, out
    assert figure(r"export " + NUMBER + " entries/s", out) > 0 and figure(r"entries/s \([\d.]+ s\), import as "
                                                                           r"shipped-archive-archive-speed " + NUMBER,
                                                                           out) > 0, out
