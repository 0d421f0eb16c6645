"""One deployment mode, two sets of settings, interleaved: which serves 16 clients better.

    .venv/bin/python -m lab.mode_settings --mode single --rounds 3 \\
        --b-layout "concurrent_workers=0 ahead=0 query_max_size=0"

`--a-layout` / `--b-layout` (single mode): the model's BatchLayout (services/llm_orchestration/
microbatch.py) as SINGLE_LAYOUT with these fields replaced; the stack's process is then started
through this module (`--serve-layout`), which patches `model_layout`. Until issue 41 those were
the NUCLEUS_LLM_CONCURRENT_WORKERS / _MICROBATCH_AHEAD / _MICROBATCH_QUERY_MAX_SIZE settings.

Each round starts the stack (`--stack-dir`, default `.bench-cache/modes-stack`: the SciFact
tenant `lab.deployment_modes` ingests; this command ingests nothing) once with settings A (the
environment as it is, plus `--a`) and once with settings B (`--b`), one after the other, and
sends `--clients` × `--per-client` SciFact queries at agent size (50 per leg, 10 results) after
a short warm-up. Per run: queries/s, CPU ms a query of the stack's processes, the cores it kept
busy (queries/s × CPU a query: what the noise of a shared machine moves least), and the loop /
model / other split of `lab.probe.thread_times` (`lab.deployment_modes.measure_load`).
Query-embedding cache off in both. On a shared machine runs of the same code drift apart
(docs/BENCHMARKS.md, "Deployment modes": single mode 76–86 queries/s over five rounds of one
half hour): compare within a round, over several rounds.
"""
from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import shlex
import sys
from pathlib import Path

from lab.deployment_modes import MODES, add_load_arguments, measure_load, start_stack


def _settings(text: str) -> dict[str, str]:
    env: dict[str, str] = {}
    for item in shlex.split(text):
        name, sep, value = item.partition("=")
        if not sep or not name:
            raise argparse.ArgumentTypeError(f"settings are NAME=VALUE pairs, got {item!r}")
        env[name] = value
    return env


def layout(text: str):
    """SINGLE_LAYOUT with the fields of `text` ("NAME=VALUE ...") replaced."""
    from services.llm_orchestration.microbatch import SINGLE_LAYOUT

    kinds = {f.name: type(getattr(SINGLE_LAYOUT, f.name)) for f in dataclasses.fields(SINGLE_LAYOUT)}
    values = {}
    for name, value in _settings(text).items():
        if name not in kinds:
            raise argparse.ArgumentTypeError(f"layout fields are {sorted(kinds)}, got {name!r}")
        values[name] = kinds[name](value)
    return dataclasses.replace(SINGLE_LAYOUT, **values)


def _serve_layout(text: str) -> None:
    """The single-mode process with `layout(text)` (argv after it: services.single_process.main's)."""
    from services.single_process import main as single

    chosen = layout(text)
    single.model_layout = lambda settings: chosen
    single.main()


async def _run(label: str, env: dict[str, str], args: argparse.Namespace, queries: list[str]) -> dict:
    layout_text = args.a_layout if label == "A" else args.b_layout
    commands = ({"single": [sys.executable, "-m", "lab.mode_settings", "--serve-layout", layout_text]}
                if layout_text else None)
    supervisor, services = start_stack(args.mode, args.stack_dir, env, commands=commands)
    try:
        work = [(args.tenant, str(i), text) for i, text in enumerate(queries)]
        load = {"top_k_initial": args.top_k_initial, "top_k_final": args.top_k_final}
        await measure_load(services, work[:32], clients=args.clients, per_client=2, **load)      # warm-up
        return {"settings": label, **await measure_load(services, work, clients=args.clients,
                                                         per_client=args.per_client, **load)}
    finally:
        supervisor.stop()


async def run(args: argparse.Namespace) -> list[dict]:
    lines = (args.dataset / "queries.jsonl").read_text(encoding="utf-8").splitlines()
    queries = [json.loads(line)["text"] for line in lines if line.strip()][-200:]
    rows = []
    for rnd in range(1, args.rounds + 1):
        for label, env in (("A", args.a), ("B", args.b)):
            row = {"round": rnd, **await _run(label, env, args, queries)}
            rows.append(row)
            print(f"round {rnd} {label}: {row['qps']:6.1f} q/s, {row['errors']} errors, {row['cpu_ms_per_query']:5.2f} "
                  f"CPU ms/q, {row['busy_cores']:.2f} cores busy | loop {row.get('loop_cores', 0):.2f} cores "
                  f"{row.get('loop_ms', 0):.2f} ms/q, run-queue wait {row.get('loop_wait_cores', 0):.2f} | model "
                  f"{row.get('model_cores', 0):.2f} cores {row.get('model_ms', 0):.2f} ms/q", flush=True)
    for rnd in range(1, args.rounds + 1):
        a, b = (next(r for r in rows if r["round"] == rnd and r["settings"] == s) for s in "AB")
        print(f"round {rnd}: A/B queries/s {a['qps'] / b['qps']:.2f}x, busy cores {a['busy_cores'] / b['busy_cores']:.2f}x")
    return rows


def main() -> None:
    if sys.argv[1:2] == ["--serve-layout"]:
        text = sys.argv[2]
        del sys.argv[1:3]
        return _serve_layout(text)
    parser = argparse.ArgumentParser(prog="python -m lab.mode_settings", description=__doc__.split("\n\n")[0])
    parser.add_argument("--dataset", type=Path, default=Path("../shared/data/scifact"), help="BEIR dataset directory")
    parser.add_argument("--mode", choices=MODES, default="single")
    parser.add_argument("--a", type=_settings, default={}, help='settings A: "NAME=VALUE ..." (default: none)')
    parser.add_argument("--b", type=_settings, default={}, help='settings B: "NAME=VALUE ..."')
    parser.add_argument("--a-layout", default="", help='single mode: model layout A, "NAME=VALUE ..." (docstring)')
    parser.add_argument("--b-layout", default="", help="single mode: model layout B")
    add_load_arguments(parser, per_client=60)
    parser.set_defaults(rounds=3)
    args = parser.parse_args()
    for text in (args.a_layout, args.b_layout):
        if text and args.mode != "single":
            parser.error("--a-layout / --b-layout apply to --mode single")
        layout(text)                    # a bad field is refused here, not in the stack
    args.stack_dir = args.stack_dir.resolve()
    if not (args.stack_dir / "knowledge_store").is_dir():
        parser.error(f"--stack-dir {args.stack_dir} holds no stack data: run lab.deployment_modes first")
    rows = asyncio.run(run(args))
    if args.out:
        args.out.write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
