"""`nucleus ingest DIR --watch` as a real process against the real stack: an added, a changed
and a deleted file each reach the search; after kill -9 a restarted watcher catches up from the
manifest (<data dir>/ingest/<tenant>/) and re-ingests only what changed while it was down."""
from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from services.knowledge_store.client import KnowledgeStoreClient
from shared.errors import NotFound
from shared.records import SearchFilters
from tests.support.retrieval import search_by_filters

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]
TENANT = "watch-cli"


def start_watcher(data_dir: Path, docs: Path, ks_target: str, log: Path) -> subprocess.Popen:
    argv = [sys.executable, "-m", "cli.main", "--data-dir", str(data_dir), "ingest", str(docs),
            "--tenant", TENANT, "--watch", "--knowledge-store-target", ks_target]
    with log.open("w") as out:
        return subprocess.Popen(argv, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT, env=dict(os.environ))


async def test_watch_process_follows_changes_and_resumes_after_kill_9(stack, tmp_path):
    docs, data = tmp_path / "docs", tmp_path / "cli-data"
    docs.mkdir()
    (docs / "one.md").write_text("The first note mentions marmots.\n")
    client = KnowledgeStoreClient(stack["knowledge_store"]["grpc"])
    procs: list[subprocess.Popen] = []
    logs = [tmp_path / "watch-1.log", tmp_path / "watch-2.log"]

    async def found(words: str) -> set[str]:
        try:
            hits, _ = await search_by_filters(client, TENANT, words, [], 20, SearchFilters())
        except NotFound:                            # before the first pass created the tenant
            return set()
        return {h.entry.artifact_id for h in hits}

    async def until(words: str, expected: set[str], what: str, timeout_s: float = 20) -> None:
        deadline = time.monotonic() + timeout_s
        while (got := await found(words)) != expected:
            for proc in procs:
                assert proc.poll() in (None, -signal.SIGKILL), \
                    f"the watcher exited ({proc.returncode}): {logs[procs.index(proc)].read_text()}"
            if time.monotonic() > deadline:
                pytest.fail(f"--watch did not reflect {what} within {timeout_s}s: search {words!r} "
                            f"gave {got}, expected {expected}\n{logs[len(procs) - 1].read_text()}")
            await asyncio.sleep(0.2)

    try:
        procs.append(start_watcher(data, docs, stack["knowledge_store"]["grpc"], logs[0]))
        await until("marmots", {"one"}, "the initial pass")
        (docs / "two.md").write_text("The second note mentions beavers.\n")
        await until("beavers", {"two"}, "an added file")
        (docs / "one.md").write_text("The first note now mentions otters.\n")
        await until("otters", {"one"}, "a changed file")
        assert await found("marmots") == set(), "the old version of one.md is replaced"
        (docs / "two.md").unlink()
        await until("beavers", set(), "a deleted file")

        procs[0].send_signal(signal.SIGKILL)
        procs[0].wait(timeout=10)
        manifest = data / "ingest" / TENANT
        assert manifest.is_dir() and any(manifest.iterdir()), "the manifest lives in <data dir>/ingest/<tenant>/"
        (docs / "one.md").write_text("The first note finally mentions lemmings.\n")
        (docs / "three.md").write_text("The third note mentions voles.\n")
        procs.append(start_watcher(data, docs, stack["knowledge_store"]["grpc"], logs[1]))
        await until("lemmings voles otters", {"one", "three"}, "the changes made while it was down")
        assert await found("otters") == set()

        def ingested() -> list[str]:
            lines = logs[1].read_text().splitlines()
            return sorted(Path(line.split()[-1]).name for line in lines if line.startswith("ingested "))

        settle = time.monotonic() + 10.0        # the watcher prints a file's line after its commit is searchable
        while ingested() != ["one.md", "three.md"] and time.monotonic() < settle:
            await asyncio.sleep(0.2)
        assert ingested() == ["one.md", "three.md"], f"only what changed is re-ingested:\n{logs[1].read_text()}"
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGKILL)
                proc.wait(timeout=10)
        await client.close()
