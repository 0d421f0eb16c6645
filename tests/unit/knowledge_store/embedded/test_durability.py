"""kill -9 at an arbitrary moment: the store holds exactly the acknowledged writes, whole."""
from __future__ import annotations

import os
import queue
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from services.knowledge_store.embedded.core import KnowledgeStore
from shared.records import SearchFilters
from tests.unit.knowledge_store.helpers import HashEmbedder, doc, settings_for

ROOT = Path(__file__).resolve().parents[4]

WRITER = """
import asyncio, sys
from pathlib import Path
from services.knowledge_store.embedded.core import KnowledgeStore
from tests.unit.knowledge_store.helpers import HashEmbedder, doc, settings_for

async def main(path, kind):
    store = KnowledgeStore(settings_for(Path(path)), HashEmbedder())
    await store.configure_index("t", kind)
    i = 0
    while True:
        long_text = " ".join(f"Paragraph {i}.{j} explains durable writes." for j in range(150))
        await store.ingest("t", "", [doc(f"a{i}", long_text), doc(f"b{i}", f"short note {i}")])
        print(f"+ a{i} b{i}", flush=True)
        if i % 3 == 0:
            await store.delete("t", [f"b{i}"])
            print(f"- b{i}", flush=True)
        i += 1

asyncio.run(main(sys.argv[1], sys.argv[2]))
"""


def _acknowledged(path: Path, kind: str, acks_before_kill: int) -> tuple[set[str], set[str]]:
    """Run the writer, SIGKILL it after `acks_before_kill` acknowledged ingests; return
    (acknowledged ingests, acknowledged deletes)."""
    proc = subprocess.Popen([sys.executable, "-c", WRITER, str(path), kind], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
    lines: queue.Queue[str | None] = queue.Queue()
    threading.Thread(target=lambda: ([lines.put(x) for x in proc.stdout], lines.put(None)), daemon=True).start()
    added: set[str] = set()
    deleted: set[str] = set()
    try:
        while len(added) < 2 * acks_before_kill:
            line = lines.get(timeout=60)
            if line is None:
                pytest.fail(f"writer died: {proc.stderr.read()}")
            sign, *ids = line.split()
            (added if sign == "+" else deleted).update(ids)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
        while (line := lines.get(timeout=30)) is not None:     # acks printed before the kill landed
            sign, *ids = line.split()
            (added if sign == "+" else deleted).update(ids)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=30)
        proc.stderr.close()
    return added, deleted


@pytest.mark.parametrize("kind", ["flat", "hnsw"])
async def test_kill_9_keeps_exactly_the_committed_writes(tmp_path, kind):
    added, deleted = _acknowledged(tmp_path, kind, acks_before_kill=12)
    store = KnowledgeStore(settings_for(tmp_path), HashEmbedder())
    try:
        integrity = await store.verify_integrity("t")
        assert integrity["records"] == integrity["vectors"] == integrity["keyword_docs"]
        listing, _ = await store.keyword("t", "", [], 1_000, SearchFilters(), hits=True)
        chunks: dict[str, int] = {}
        for hit in listing:
            chunks[hit.entry.artifact_id] = chunks.get(hit.entry.artifact_id, 0) + 1
        assert integrity["records"] == sum(chunks.values())
        missing = (added - deleted) - set(chunks)
        last = max(int(a[1:]) for a in added)
        # only an in-flight (unacknowledged) delete of the last note may have removed one
        assert missing <= ({f"b{last}"} if last % 3 == 0 else set()), "every acknowledged write survived"
        # an unacknowledged in-flight request is either wholly there or wholly absent
        long_counts = {n for a, n in chunks.items() if a.startswith("a")}
        assert len(long_counts) == 1 and long_counts.pop() > 1
        assert not deleted & set(chunks), "acknowledged deletes stay deleted"
        extra = set(chunks) - added
        assert len(extra) <= 2, f"at most the one in-flight ingest beyond the acks: {extra}"
        # the store is writable and consistent after recovery
        await store.ingest("t", "", [doc("after", "written after the crash")])
        after = await store.verify_integrity("t")
        assert after["records"] == after["vectors"] == after["keyword_docs"] == integrity["records"] + 1
        assert (await store.stats("t")).index_kind == kind
    finally:
        store.close()
