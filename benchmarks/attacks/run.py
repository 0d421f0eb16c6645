"""Run the attack suite: start a secure stack in a fresh data directory (or open the running one a
secure start began, `--use-running`), ingest the corpus with the operator credential, run the
families in order (ports first, so anything a refused call had injected would show up in the
matrix), stop the stack (the one it started), and return the report."""
from __future__ import annotations

import asyncio
import os
import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from benchmarks.attacks import console, federation, findings, hostile, matrix, ports
from benchmarks.attacks.oracle import Artifact, Oracle, TenantRules
from benchmarks.attacks.tally import Report
from benchmarks.attacks.wire import Forge
from benchmarks.secure_stack import (
    ACME_RULES,
    GLOBEX_CANARY,
    LEGAL_CANARY,
    corpus,
    ingest_corpus,
    running_secure_stack,
    start_secure_stack,
)

FAMILIES = {
    "a": "every port, bad credentials",
    "b": "principal matrix, MCP + gRPC",
    "c": "low findings",
    "d": "hostile documents, malformed links",
    "f": "federation: cross-user, cross-tenant, forged identity, loops, hostile remotes",
    "g": "web console: fixation, CSRF, stored XSS, cross-tenant, roles, login limit, logout",
}


@dataclass
class Options:
    families: str = "abcdfg"
    stack_dir: Path | None = None        # keep the stack's data (logs, audit) here; default: a temporary dir
    timeout_s: float = 240.0
    running_data_dir: Path | None = None  # attack the secure stack running there instead of starting one


def build_oracle() -> Oracle:
    artifacts = [Artifact(d.artifact.artifact_id, tenant, d.artifact.source_id, frozenset(d.artifact.visibility_groups),
                          frozenset(d.artifact.tags))
                 for tenant, docs in corpus().items() for d in docs]
    return Oracle(artifacts, {"acme": TenantRules.from_config(ACME_RULES)},
                  {GLOBEX_CANARY: "globex/globex-travel", LEGAL_CANARY: "acme/legal-hotel-settlement",
                   ports.INJECTED_CANARY: f"acme/{ports.INJECTED}"})


def run_suite(options: Options, say: Callable[[str], None] = print) -> Report:
    report = Report(meta={"started_unix": int(time.time())})
    running = options.running_data_dir
    data_dir = running or options.stack_dir or Path(tempfile.mkdtemp(prefix="nucleus-attack-"))
    env = {k: os.environ.get(k, "1") for k in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")}
    t0 = time.perf_counter()
    say(f"{'attacking the running' if running else 'starting a'} secure stack in {data_dir} ...")
    supervisor = None
    try:
        if running:
            stack = running_secure_stack(running)
        else:
            stack, supervisor = start_secure_stack(data_dir, extra_env=env, timeout_s=options.timeout_s)
        asyncio.run(ingest_corpus(stack, missing_only=running is not None))
        report.meta["stack_start_s"] = round(time.perf_counter() - t0, 1)
        forge, oracle = Forge(stack.identity_dir), build_oracle()
        steps = {"a": lambda fam: ports.run(fam, stack, forge),
                 "b": lambda fam: matrix.run(fam, stack, oracle),
                 "c": lambda fam: findings.run(fam, stack, forge),
                 "d": lambda fam: hostile.run(fam, stack),
                 "f": lambda fam: federation.run(fam, stack),
                 "g": lambda fam: console.run(fam, stack)}
        for key in options.families:
            fam = report.family(f"({key})", FAMILIES[key])
            t = time.perf_counter()
            say(f"family ({key}) {FAMILIES[key]} ...")
            steps[key](fam)
            report.meta[f"family_{key}_s"] = round(time.perf_counter() - t, 1)
            say(f"  {fam.calls} calls, {fam.counts['refused']} refused, {fam.counts['leak']} leaks, "
                f"{fam.counts['missed']} missed, {fam.counts['error']} errors ({report.meta[f'family_{key}_s']} s)")
    finally:
        if supervisor is not None:
            supervisor.stop()
        if running is None and options.stack_dir is None:
            shutil.rmtree(data_dir, ignore_errors=True)
    report.meta["duration_s"] = round(time.perf_counter() - t0, 1)
    return report


__all__ = ["FAMILIES", "Options", "build_oracle", "run_suite"]
