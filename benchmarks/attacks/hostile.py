"""Family (d): hostile input — documents and malformed links — against the running stack.

    hostile documents   zip bombs (DOCX, XLSX, PPTX), a PDF bomb, a billion-laughs DOCX, deeply
                        nested HTML, impossible dates, a reputation out of range, NUL and
                        control-character text, an unsupported type, next to one good file,
                        ingested as `nucleus ingest` does (FolderIngest, conversion worker, the
                        KnowledgeStore over gRPC with the operator credential) into a tenant of
                        its own: every hostile file refused with its reason, the good one
                        ingested, the conversion worker's peak memory under 1 GB
    malformed links     a document link validly signed with the stack's link secret but naming
                        a malformed tenant (`../beta`, `alpha/../beta`) is refused 4xx, never
                        5xx; a link to an entry the user may not open and one to a missing entry
                        get one and the same 403 answer
    notifications       `tools/call` notifications with a non-string name leave no traceback in
                        the RAGPipeline log
"""
from __future__ import annotations

import asyncio
import os
import resource
import tempfile
import time
from pathlib import Path

from benchmarks.attacks.tally import Family
from benchmarks.attacks.wire import McpHttp
from benchmarks.hostile_files import write_hostile_folder
from benchmarks.secure_stack import SecureStack
from shared.signing import LinkSigner

HOSTILE_TENANT = "hostile-attack"
HIDDEN_ENTRY = "hr-travel-exceptions-2026#0"        # group hr: hidden from alice
INFLATE_MB = 300                                    # past the default entry (256 MB) and stream (64 MB) limits


def documents(fam: Family, stack: SecureStack) -> None:
    from cli.folder_ingest import INGESTED, FolderIngest
    from services.knowledge_store.client import KnowledgeStoreClient

    with tempfile.TemporaryDirectory(prefix="nucleus-hostile-") as tmp:
        root = Path(tmp) / "docs"
        expected = write_hostile_folder(root / "hostile", inflate_mb=INFLATE_MB)
        (root / "good.md").write_text("---\ntitle: Good\n---\nThe good file of a hostile folder.\n")
        disk_kib = sum(p.stat().st_size for p in root.rglob("*") if p.is_file()) // 1024

        async def ingest():
            client = KnowledgeStoreClient(stack.addresses["knowledge_store"]["grpc"],
                                          interceptors=stack.operator("knowledge_store"))
            try:
                return await FolderIngest(client, root, HOSTILE_TENANT).run()
            finally:
                await client.close()

        started = time.perf_counter()
        summary = asyncio.run(ingest())
        seconds = time.perf_counter() - started
    worker_mib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    failed = {os.path.basename(o.path): o for o in summary.failed}
    for name, (reason, words) in expected.items():
        got = failed.get(name)
        ok = got is not None and got.reason == reason and words in got.detail
        fam.check(f"hostile {name} is refused: {reason}", ok,
                  got.detail[-140:] if got else "not refused", refused=int(ok))
    good = [o for o in summary.outcomes if o.path.endswith("good.md")]
    fam.check("the good file next to them is ingested", bool(good) and good[0].status == INGESTED,
              good[0].status if good else "missing")
    fam.check("the conversion worker's peak memory stays under 1 GB", worker_mib < 1024,
              f"{worker_mib:.0f} MiB peak, {seconds:.1f} s for {len(expected) + 1} files ({disk_kib} KiB on disk)",
              calls=0)


def links(fam: Family, stack: SecureStack) -> None:
    signer = LinkSigner(stack.link_secret.encode(), stack.base_url, 600)
    with McpHttp(stack.mcp_url, stack.headers("alice")) as s:
        for tenant in ("../beta", "alpha/../beta", "acme/../globex", ""):
            answer = s.client.get(signer.sign("pallas-battery-guide-2026#0", tenant, "alice"))
            ok = 400 <= answer.status_code < 500
            fam.check(f"a validly signed link with tenant {tenant!r} is refused 4xx", ok,
                      f"HTTP {answer.status_code} {answer.text[:80]}", refused=int(ok))
        hidden = s.client.get(signer.sign(HIDDEN_ENTRY, "acme", "alice"))
        missing = s.client.get(signer.sign("attack-no-such-entry#0", "acme", "alice"))
        ok = hidden.status_code == missing.status_code == 403 and hidden.text == missing.text
        fam.check("a link the user may not open and one to a missing entry get one 403 answer", ok,
                  f"hidden HTTP {hidden.status_code} {hidden.text[:60]} | missing HTTP {missing.status_code}",
                  calls=2, refused=2 if ok else 0)


def notifications(fam: Family, stack: SecureStack) -> None:
    log = stack.log_dir / "rag_pipeline.log"
    before = log.read_text(errors="replace").count("Traceback") if log.exists() else 0
    with McpHttp(stack.mcp_url, stack.headers("alice")) as s:
        s.initialize()
        s.raw(body={"jsonrpc": "2.0", "method": "notifications/initialized"})
        statuses = [s.raw(body={"jsonrpc": "2.0", "method": "tools/call", "params": params}).status_code
                    for params in ({"name": 123}, {"name": None}, {"name": ["x"]}, {"name": "rag_search",
                                                                                     "arguments": [1]})]
        alive = s.request("tools/list", {})
    time.sleep(0.5)
    after = log.read_text(errors="replace").count("Traceback") if log.exists() else 0
    ok = after == before and alive.status == 200
    fam.check("malformed tools/call notifications leave no traceback in the RAGPipeline log", ok,
              f"HTTP {statuses}, {after - before} new tracebacks, session HTTP {alive.status}", calls=len(statuses) + 1,
              refused=len(statuses) if ok else 0)


def run(fam: Family, stack: SecureStack) -> None:
    for section, step in (("hostile documents", lambda: documents(fam, stack)),
                          ("malformed links", lambda: links(fam, stack)),
                          ("notifications", lambda: notifications(fam, stack))):
        fam.section = section
        try:
            step()
        except Exception as err:  # noqa: BLE001 - one broken check must not hide the others
            fam.record("error", f"{section} check crashed", repr(err)[:300])


__all__ = ["run"]
