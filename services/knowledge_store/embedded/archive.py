"""The embedded backend's primitives of the tenant archive (../archive.py): the artifacts in id
order, prepared entries written with their stored vectors, and an import built aside; the
store's methods (`Archives`, a mixin of core.KnowledgeStore):

    archive_listing  (artifact id, its entry ids) after an artifact id, in id order
    put_archived  prepared artifacts with their vectors, title vectors and feedback counters in one
               write (the ingest's: SQLite transaction, then FAISS and the keyword index)
    import_stage  a store of its own in `<data dir>/.import-<tenant>-…` receives the import; commit
               closes it and swaps its tenant directory with the tenant's exactly as a restore
               does (backup.py `swap`; the tenant answers UNAVAILABLE for the swap only), abort
               removes it: the tenant is untouched until the swap; what a killed process left
               (its `.import-*` directory, its `.archive-*` scratch files: ../archive_file.py) is
               removed when the store opens (`sweep`)
    user_data  the per-user votes (`votes`), the search log (`searches`), the votes on federated
               sources (`source_votes`), the vote log (`feedback`, with the search each vote named
               from `search_votes`: ../archive_file.py `vote_log`) and the votes that named a
               search still logged (`search_votes`) as archive records, in key order (searches by
               time, so written back they keep the write order pruning goes by; the log by time);
               written back in one write transaction each batch (the artifacts' counters travel
               with the artifacts; the log counts nothing again: a vote of the log is `counted`
               when it is its user's current vote, as record_feedback leaves it; two votes of one
               user on one document within a second keep no order but that)
    tenant_fingerprint  the tenant's embedding model fingerprint (../fingerprints.py), in its `meta`
               table (key FINGERPRINT_KEY), written in an ordinary write transaction
"""
from __future__ import annotations

import asyncio
import json
import logging
import os
import shutil
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from services.knowledge_store import archive_file, validation
from services.knowledge_store.embedded import backup, storage
from services.knowledge_store.embedded.keyword_index import KeywordBatch
from services.knowledge_store.embedded.reads import read_stored
from services.knowledge_store.embedded.tenants import Tenants
from services.knowledge_store.embedded.writes import NO_CHANGE, IndexChange, write
from services.knowledge_store.preparation import PreparedDocument
from shared.errors import FailedPrecondition

log = logging.getLogger(__name__)
FINGERPRINT_KEY = "model_fingerprint"
Archived = tuple[str, PreparedDocument, np.ndarray, "np.ndarray | None", tuple[int, int]]


_USER_READS = {
    "vote": ("SELECT artifact_id, user_id, helpful, target, target_id, updated_unix FROM votes "
             "ORDER BY artifact_id, user_id", ("artifact_id", "user_id", "helpful", "target", "target_id",
                                               "updated_unix")),
    "search": ("SELECT search_id, user_id, created_unix, query_sha256, items FROM searches "
               "ORDER BY created_unix, search_id",
               ("search_id", "user_id", "created_unix", "query_sha256", "items")),
    "source_vote": ("SELECT source_id, user_id, helpful, target_id, updated_unix FROM source_votes "
                    "ORDER BY source_id, user_id", ("source_id", "user_id", "helpful", "target_id", "updated_unix")),
    "search_vote": ("SELECT search_id, target_id, user_id, helpful, created_unix FROM search_votes "
                    "WHERE search_id IN (SELECT search_id FROM searches) ORDER BY search_id, target_id, user_id",
                    ("search_id", "target_id", "user_id", "helpful", "created_unix")),
    "feedback": ("SELECT artifact_id, target, target_id, user_id, helpful, comment, created_unix FROM feedback",
                 ("artifact_id", "target", "target_id", "user_id", "helpful", "comment", "created_unix")),
}


class Archives:
    """The store's side of the tenant archive (a mixin of core.KnowledgeStore: `self._tenants` is
    the store's; `self._forget_data_id` drops its cached `data_id` of a tenant swapped out)."""

    _tenants: Tenants
    _forget_data_id: Callable[[str], None]

    async def archive_listing(self, tenant_id: str, after: str, limit: int) -> list[tuple[str, list[str]]]:
        """(artifact id, its entry ids) of up to `limit` artifacts after `after`, in id order."""
        validation.tenant_id(tenant_id)

        def read(conn) -> list[tuple[str, list[str]]]:
            ids = [r[0] for r in conn.execute("SELECT artifact_id FROM artifacts WHERE artifact_id > ? "
                                              "ORDER BY artifact_id LIMIT ?", (after, limit))]
            out: dict[str, list[str]] = {a: [] for a in ids}
            marks = ",".join("?" * len(ids))
            for a, e in conn.execute(f"SELECT artifact_id, entry_id FROM entries WHERE artifact_id IN ({marks}) "
                                     "ORDER BY artifact_id, chunk_index", ids):
                out[a].append(e)
            return list(out.items())

        return await read_stored(self._tenants, tenant_id, read, absent=[], action="export")

    async def put_archived(self, tenant_id: str, items: Sequence[Archived]) -> None:
        """Archived artifacts written with their stored vectors and feedback counters (one write)."""
        validation.tenant_id(tenant_id)
        tenants = self._tenants
        now = int(time.time())
        keywords = KeywordBatch.from_docs(((r.fts_title, r.fts_body) for _, p, _, _, _ in items for r in p.rows),
                                          tenants.bm25_weights)
        vectors = np.concatenate([v for _, _, v, _, _ in items]).astype(np.float32)

        def work(conn) -> tuple[None, IndexChange]:
            removed, added = [], []
            for persona, p, vecs, title_vector, (helpful, unhelpful) in items:
                old, new = storage.entries.replace_artifact(conn, p.meta, persona, now, p.rows, vecs, title_vector)
                conn.execute("UPDATE artifacts SET feedback_helpful = ?, feedback_unhelpful = ? "
                             "WHERE artifact_id = ?", (helpful, unhelpful, p.meta.artifact_id))
                removed += old
                added += new
            return None, IndexChange(removed, added, vectors, keywords)

        await write(tenants, tenant_id, work, create=True, action="import")

    async def import_stage(self, tenant_id: str, replace: bool) -> ImportStage:
        """A store of its own to import the tenant into, swapped in on commit (module docstring);
        its embedder is this store's (checked, L2-normalised vectors)."""
        validation.tenant_id(tenant_id)
        return stage(self._tenants, tenant_id, replace, lambda settings: type(self)(settings, self),
                     swapped=lambda: self._forget_data_id(tenant_id))

    async def user_data(self, tenant_id: str, kind: str) -> list[dict]:
        """The tenant's user data of one kind as archive records (module docstring, ../archive.py)."""
        validation.tenant_id(tenant_id)
        sql, names = _USER_READS[kind]

        def read(conn) -> list[dict]:
            out = []
            for row in conn.execute(sql):
                r = {"kind": kind, **dict(zip(names, row))}
                if "helpful" in r:
                    r["helpful"] = bool(r["helpful"])
                if kind == "search":
                    r["items"] = json.loads(r["items"])
                out.append(r)
            if kind == "feedback":
                votes_sql, votes = _USER_READS["search_vote"]
                return archive_file.vote_log(out, (dict(zip(votes, row)) for row in conn.execute(votes_sql)))
            return out

        return await read_stored(self._tenants, tenant_id, read, absent=[], action="export")

    async def put_user_data(self, tenant_id: str, kind: str, records: Sequence[dict]) -> None:
        """Checked user data records of `kind` written in one transaction (a key already there: replaced)."""
        validation.tenant_id(tenant_id)

        def work(conn):
            if kind == "vote":
                conn.executemany("INSERT OR REPLACE INTO votes(artifact_id, user_id, helpful, target, target_id, "
                                 "updated_unix) VALUES (?, ?, ?, ?, ?, ?)",
                                 [(r["artifact_id"], r["user_id"], int(r["helpful"]), r["target"], r["target_id"],
                                   r["updated_unix"]) for r in records])
            elif kind == "search":
                conn.executemany("INSERT OR REPLACE INTO searches(search_id, user_id, created_unix, query_sha256, "
                                 "items) VALUES (?, ?, ?, ?, ?)",
                                 [(r["search_id"], r["user_id"], r["created_unix"], r["query_sha256"],
                                   json.dumps(r["items"], ensure_ascii=False)) for r in records])
            elif kind in ("feedback", "search_vote"):
                for r in records:
                    if kind == "feedback":
                        # counted: the user's current vote (written before the log), the last of the log
                        # that is it; an anonymous vote (store schema 1) counts
                        counted = not r["user_id"] or conn.execute(
                            "SELECT 1 FROM votes WHERE artifact_id = ? AND user_id = ? AND helpful = ? "
                            "AND target_id = ? AND updated_unix = ?",
                            (r["artifact_id"], r["user_id"], int(r["helpful"]), r["target_id"],
                             r["created_unix"])).fetchone() is not None
                        if counted and r["user_id"]:
                            conn.execute("UPDATE feedback SET counted = 0 WHERE artifact_id = ? AND user_id = ? AND "
                                         "counted = 1", (r["artifact_id"], r["user_id"]))
                        conn.execute("INSERT INTO feedback(created_unix, target, target_id, artifact_id, helpful, "
                                     "user_id, comment, counted) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                                     (r["created_unix"], r["target"], r["target_id"], r["artifact_id"],
                                      int(r["helpful"]), r["user_id"], r["comment"], int(counted)))
                    if r["search_id"]:
                        storage.feedback_log.note_search_vote(conn, r["search_id"], r["target_id"], r["user_id"],
                                                              r["helpful"], r["created_unix"])
            else:
                conn.executemany("INSERT OR REPLACE INTO source_votes(source_id, user_id, helpful, target_id, "
                                 "updated_unix) VALUES (?, ?, ?, ?, ?)",
                                 [(r["source_id"], r["user_id"], int(r["helpful"]), r["target_id"], r["updated_unix"])
                                  for r in records])
            return None, NO_CHANGE

        await write(self._tenants, tenant_id, work, create=True, action="import", quiet=True)

    async def tenant_fingerprint(self, tenant_id: str) -> str:
        """The tenant's recorded embedding model fingerprint ("" none recorded; ../fingerprints.py)."""
        validation.tenant_id(tenant_id)
        return await read_stored(self._tenants, tenant_id,
                                 lambda conn: storage.db.get_meta(conn, FINGERPRINT_KEY) or "",
                                 absent="", action="fingerprint read")

    async def set_tenant_fingerprint(self, tenant_id: str, fingerprint: str) -> None:
        validation.tenant_id(tenant_id)

        def work(conn):
            storage.db.set_meta(conn, FINGERPRINT_KEY, fingerprint)
            return None, NO_CHANGE

        await write(self._tenants, tenant_id, work, create=True, action="fingerprint write", quiet=True)


def sweep(data_dir: Path) -> list[Path]:
    """Remove the import directories and archive scratch files of processes no longer running
    (a kill -9 during an import or export); the paths removed."""
    return archive_file.sweep(data_dir, (".import-*", ".archive-*"))


class ImportStage:
    """Where an import is written, and how it takes the tenant's place (module docstring)."""

    def __init__(self, owner: Tenants, tenant_id: str, make_store, swapped=lambda: None) -> None:
        self._owner, self._tenant_id, self._swapped = owner, tenant_id, swapped
        root = Path(owner.settings.data_dir)
        self._dir = root / f".import-{storage.db.tenant_dir_name(tenant_id)}-{os.getpid()}-{os.urandom(3).hex()}"
        self._dir.mkdir(mode=0o700, parents=True)
        self.store = make_store(owner.settings.model_copy(update={"data_dir": self._dir}))

    async def commit(self) -> None:
        self.store.close()
        root = Path(self._owner.settings.data_dir) / "tenants"
        staged = self._dir / "tenants" / storage.db.tenant_dir_name(self._tenant_id)
        if not staged.is_dir():            # an empty archive: an empty tenant
            staged.mkdir(parents=True, mode=0o700)

        def swap() -> None:
            root.mkdir(parents=True, exist_ok=True)
            with self._owner.unavailable_for(self._tenant_id, "being imported"):
                backup.swap(root, self._tenant_id, staged)
                self._swapped()
            shutil.rmtree(self._dir, ignore_errors=True)

        await asyncio.to_thread(swap)

    async def abort(self) -> None:
        self.store.close()
        await asyncio.to_thread(shutil.rmtree, self._dir, True)


def stage(owner: Tenants, tenant_id: str, replace: bool, make_store, swapped=lambda: None) -> ImportStage:
    if owner.settings.read_only:
        raise FailedPrecondition("the KnowledgeStore is configured read-only: an import is refused")
    if owner.database_path(tenant_id).exists() and not replace:
        raise FailedPrecondition(f"tenant '{tenant_id}' already holds data: import it with --replace to replace it "
                                 "(its documents, profiles and personas), or import --as-tenant another tenant")
    return ImportStage(owner, tenant_id, make_store, swapped)
