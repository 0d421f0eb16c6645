"""`nucleus ingest` as a real process against the real stack, on a folder holding zip bombs
(DOCX, XLSX, PPTX), a PDF bomb, a billion-laughs DOCX, deeply nested HTML, impossible dates, a
bad reputation, NUL and control-character text and an unsupported type next to good files:
every good file is ingested (with a citable source_uri from --base-url), every bad one is listed
with file, line where there is one, and reason, the exit code is 2, and the ingest's peak memory
(the CLI and its conversion worker) stays under 1 GB. Limits are small here (NUCLEUS_INGEST_*)."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.hostile_files import write_hostile_folder
from benchmarks.sample_files import write_pdf
from services.knowledge_store.client import KnowledgeStoreClient
from shared.records import SearchFilters
from tests.support.retrieval import search_by_filters

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]
TENANT = "hostile-cli"
LIMITS = {"NUCLEUS_INGEST_MAX_ENTRY_MB": "4", "NUCLEUS_INGEST_MAX_ARCHIVE_MB": "8",
          "NUCLEUS_INGEST_MAX_PDF_STREAM_MB": "4", "NUCLEUS_INGEST_MEMORY_MB": "512",
          "NUCLEUS_INGEST_TIMEOUT_S": "60"}
# The CLI in a child process that reports the peak resident memory of itself and of its own
# children (the conversion worker) once it is done: ru_maxrss is in KiB on Linux.
MEASURED = ("import resource, sys\n"
            "from cli.main import main\n"
            "code = main(sys.argv[1:])\n"
            "peak = max(resource.getrusage(w).ru_maxrss for w in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN))\n"
            "print(f'PEAK_RSS_KIB={peak}')\n"
            "sys.exit(code)\n")


async def test_a_hostile_folder_ingests_the_good_files_and_lists_every_bad_one(stack, tmp_path):
    docs = tmp_path / "docs"
    expected = write_hostile_folder(docs / "hostile", inflate_mb=8)
    write_pdf(docs / "guide.pdf", [["Welcome."], ["The osprey checklist is on page two."]], title="Osprey Guide")
    (docs / "notes.md").write_text("---\ntitle: Osprey Notes\ncreated: 2025-02-28\nreputation: 0.9\n---\n"
                                   "The osprey nests by the quay.\n")
    argv = ["--data-dir", str(tmp_path / "cli-data"), "ingest", str(docs), "--tenant", TENANT,
            "--base-url", "https://files.example/docs", "--knowledge-store-target", stack["knowledge_store"]["grpc"]]
    env = {**os.environ, **LIMITS, "COLUMNS": "400", "NO_COLOR": "1"}
    done = subprocess.run([sys.executable, "-c", MEASURED, *argv], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=300)
    out = done.stdout + done.stderr
    assert done.returncode == 2, out
    assert "Traceback" not in out, out
    flat = " ".join(out.split())                      # a long line may wrap on the terminal
    rejected = ["rejected " + part for part in flat.split("rejected ")[1:]]
    assert len(rejected) == len(expected), out
    for name, (reason, words) in expected.items():
        line = next((x for x in rejected if f"/hostile/{name}:" in x), "")
        assert line.startswith(f"rejected {reason}: ") and words in line, (name, out)
    peak_mib = int(out.split("PEAK_RSS_KIB=")[1].split()[0]) / 1024
    assert peak_mib < 1024, f"peak resident memory {peak_mib:.0f} MiB"

    client = KnowledgeStoreClient(stack["knowledge_store"]["grpc"])
    try:
        hits, _ = await search_by_filters(client, TENANT, "osprey checklist quay", [], 20, SearchFilters())
    finally:
        await client.close()
    by_id = {h.entry.artifact_id: h for h in hits}
    assert set(by_id) == {"guide", "notes"}
    assert by_id["guide"].artifact.source_uri == "https://files.example/docs/guide.pdf"
    assert by_id["guide"].artifact.title == "Osprey Guide"
    assert abs(by_id["notes"].artifact.reputation_prior - 0.9) < 1e-6
