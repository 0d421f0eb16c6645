"""Single-query latency of the ONNX encoder in-process: thread spinning and the pause between
queries.

    .venv/bin/python -m lab.onnx_session [--dataset ../shared/data/scifact]
        [--queries 200] [--gaps-ms 2 10] [--threads 2] [--json]

Exports all-MiniLM-L6-v2 into a temporary folder as LlmOrchestration does
(`onnx_encoder.export_onnx`), then encodes the dataset's last `--queries` queries one at a
time for every spin mode (`onnx_encoder.SPIN_MODES`) × pause, sleeping the pause between
queries (inside SearchAndRank the model idles ~10 ms between queries; back-to-back callers
barely pause). Reports the p50 / p90 per query and the process CPU time per query.
The last line printed is one JSON object with the figures (`--json`: only that line).
"""
from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

from benchmarks.baseline import load_model
from services.llm_orchestration import onnx_encoder
from services.llm_orchestration.onnx_encoder import OnnxEncoder, open_session

WARMUP = 10


def _queries(dataset: Path, n: int) -> list[str]:
    lines = (dataset / "queries.jsonl").read_text(encoding="utf-8").splitlines()
    return [json.loads(line)["text"] for line in lines if line.strip()][-n:]


def _time(encoder: OnnxEncoder, queries: list[str], gap_s: float) -> dict[str, float]:
    for text in queries[:WARMUP]:
        encoder.encode([text])
    wall: list[float] = []
    cpu_start = time.process_time()
    for text in queries:
        started = time.perf_counter()
        encoder.encode([text])
        wall.append((time.perf_counter() - started) * 1000)
        time.sleep(gap_s)
    return {"p50_ms": statistics.median(wall), "p90_ms": float(np.percentile(wall, 90)),
            "cpu_ms_per_query": (time.process_time() - cpu_start) * 1000 / len(queries)}


def run(args: argparse.Namespace) -> dict:
    model = load_model()
    queries = _queries(args.dataset, args.queries)
    rows = []
    with tempfile.TemporaryDirectory(prefix="onnx-session-") as tmp:
        path = Path(tmp) / "model.onnx"
        onnx_encoder.export_onnx(model, path)
        encoders = {spin: OnnxEncoder(open_session(path, args.threads, spin), model.tokenizer,
                                      max_seq_length=int(model.max_seq_length))
                    for spin in onnx_encoder.SPIN_MODES}
        for gap_ms in args.gaps_ms:
            for spin, encoder in encoders.items():
                rows.append({"spin": spin, "gap_ms": gap_ms, **_time(encoder, queries, gap_ms / 1000)})
                if not args.json:
                    r = rows[-1]
                    print(f"pause {gap_ms:>4g} ms  {spin:10s}  p50 {r['p50_ms']:5.2f}  "
                          f"p90 {r['p90_ms']:5.2f}  cpu/query {r['cpu_ms_per_query']:5.2f} ms", flush=True)
    return {"threads": args.threads, "queries": len(queries), "rows": rows}


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m lab.onnx_session", description=__doc__.split("\n\n")[0])
    parser.add_argument("--dataset", type=Path, default=Path("../shared/data/scifact"),
                        help="BEIR dataset folder (its queries.jsonl)")
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--gaps-ms", type=float, nargs="+", default=[2.0, 10.0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--json", action="store_true", help="print only the JSON line")
    print(json.dumps(run(parser.parse_args())))


if __name__ == "__main__":
    main()
