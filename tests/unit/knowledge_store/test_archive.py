"""The portable tenant archive (archive.py, archive_file.py) on real stores: embedded → archive →
Qdrant (local mode) → archive → embedded keeps ids, texts, metadata, vectors, profiles,
personas, feedback counters and user data (votes, search log, source votes, the vote log with its
comments and the votes that named a search; under another tenant id only with `with_user_data`),
and searches answer the same; damaged, truncated, foreign-key, other-model and regrouped archives,
and bad user data records, are refused with nothing written; an older format still imports."""
from __future__ import annotations

import hashlib
import json
import os
import re
import sqlite3
import time

import numpy as np
import pytest

from ranking.profile import RankingProfile
from services.knowledge_store.archive import _write_records, export_records, import_archive
from services.knowledge_store.archive_file import USER_KINDS, _line, mac_of, open_archive, write_archive
from services.knowledge_store.backend import open_store
from services.knowledge_store.personas import Persona
from shared.errors import FailedPrecondition, InvalidArgument
from shared.records import SearchFilters, SearchLogItem, SearchLogRecord
from shared.text_hash import text_hash
from tests.unit.knowledge_store.helpers import HashEmbedder, doc, settings_for

KEY = bytes(range(32))
SID = "s" * 24
MODEL = {"name": "hash-test", "dimension": 384}
WORDS = ("volcanic ash climate yeast bread sourdough glacier ocean engine aircraft sulfur brewer dough "
         "ferment ice atmosphere strain sugar alcohol cloud").split()
CORPUS = [doc(f"d{i:02d}", " ".join(WORDS[(i * 7 + k) % len(WORDS)] for k in range(40)) + f". Part {i}.",
              title=f"Doc {i}", source_type="wiki" if i % 2 else "blog", source_id="s", tags=(f"t{i % 3}",),
              owners=("ann",), created_unix=1_000 + i, visibility_groups=("lab",) if i == 3 else ())
          for i in range(12)]


def _store(path, backend="embedded"):
    extra = {"backend": "qdrant", "qdrant_path": path / "qdrant"} if backend == "qdrant" else {}
    return open_store(settings_for(path, chunk_tokens=32, **extra), HashEmbedder())


async def _fill(store, tenant="acme"):
    await store.ingest(tenant, "", CORPUS[:10])
    await store.ingest(tenant, "p1", CORPUS[10:])
    await store.put_profile(RankingProfile(tenant_id=tenant, name="news", recency_weight=0.5))
    await store.put_profile(RankingProfile(tenant_id=tenant, name="news", recency_weight=0.7))
    await store.put_persona(Persona(tenant_id=tenant, persona_id="p1", display_name="Pat", system_prompt="hi"))
    await store.record_feedback(tenant, "artifact", "d01", True, "u1")
    await store.record_feedback(tenant, "artifact", "d01", False, "u2")
    await store.record_search(SearchLogRecord(tenant, SID, "u3", int(time.time()), "0" * 64, (
        SearchLogItem("d02#0", "d02", 1), SearchLogItem("d04#0", "d04", 2), SearchLogItem("legal:z", "legal:z", 3))))
    await store.record_source_feedback(tenant, "legal", "legal:x", False, "u1")
    await store.record_source_feedback(tenant, "legal", "legal:y", True, "u2")
    await store.record_feedback(tenant, "entry", "d02#0", True, "u3", comment="the ash figures, thanks", search_id=SID)
    await store.record_source_feedback(tenant, "legal", "legal:z", True, "u3", search_id=SID)


async def _user_data(store, tenant):
    return {kind: await store.user_data(tenant, kind) for kind in USER_KINDS}


def _counted(store) -> list[tuple]:
    with sqlite3.connect(store._tenants.database_path("acme")) as conn:
        return sorted(conn.execute("SELECT artifact_id, user_id, helpful, counted FROM feedback"))


async def _export(store, tenant, path, key=KEY, model=MODEL):
    return await write_archive(path, key, tenant, model, export_records(store, tenant))


async def _everything(store, tenant):
    listing = await store.archive_listing(tenant, "", 1_000)
    ids = [e for _, es in listing for e in es]
    hits = {h.entry.id: h for h in await store.get_entries(tenant, ids)}
    vectors = await store.entry_vectors(tenant, ids)
    return listing, hits, vectors


@pytest.fixture
async def source(tmp_path):
    store = _store(tmp_path / "a")
    await _fill(store)
    yield store
    store.close()


async def test_a_tenant_goes_embedded_to_qdrant_and_back_unchanged(source, tmp_path):
    first = tmp_path / "one.archive"
    await _export(source, "acme", first)
    assert oct(first.stat().st_mode & 0o777) == "0o600"
    qdrant = _store(tmp_path / "q", "qdrant")
    back = _store(tmp_path / "b")
    try:
        report = await import_archive(qdrant, open_archive(first, KEY), "acme", MODEL)
        assert (report.artifacts, report.profiles, report.personas, report.user_records) == (12, 2, 1, 12)
        second = tmp_path / "two.archive"
        await _export(qdrant, "acme", second)
        await import_archive(back, open_archive(second, KEY), "acme", MODEL)
        assert _counted(back) == _counted(source)       # which vote of the log each user's current one is
        for target in (qdrant, back):
            listing, hits, vectors = await _everything(target, "acme")
            want_listing, want_hits, want_vectors = await _everything(source, "acme")
            assert listing == want_listing and set(hits) == set(want_hits) and len(hits) > 12
            for e, h in want_hits.items():
                got = hits[e]
                assert (got.entry.text, got.entry.headline, got.entry.persona_id, got.entry.richness,
                        got.entry.text_hash) == (h.entry.text, h.entry.headline, h.entry.persona_id, h.entry.richness,
                                                 text_hash(h.entry.text))
                assert (got.entry.span_start, got.entry.span_end) == (h.entry.span_start, h.entry.span_end) \
                    and h.entry.span_end > h.entry.span_start
                assert got.artifact == h.artifact            # metadata and feedback counters
                np.testing.assert_allclose(vectors[e], want_vectors[e], atol=1e-6)
            titles = await target.title_vectors("acme", ["d00", "d05"])
            want = await source.title_vectors("acme", ["d00", "d05"])
            np.testing.assert_allclose(titles["d05"], want["d05"], atol=1e-6)
            assert [(p.name, p.version, p.recency_weight) for p in await target.list_profiles("acme")] == [
                (p.name, p.version, p.recency_weight) for p in await source.list_profiles("acme")]
            assert (await target.get_profile("acme", "", "news", 1)).recency_weight == 0.5
            assert (await target.get_persona("acme", "p1")).display_name == "Pat"
            want_user = await _user_data(source, "acme")
            assert [len(v) for v in want_user.values()] == [3, 1, 3, 3, 2]
            assert await _user_data(target, "acme") == want_user          # and the counters above: none again
            [said] = [r for r in want_user["feedback"] if r["comment"]]          # comment, search id, time: equal
            assert (said["target_id"], said["comment"], said["search_id"]) == ("d02#0", "the ash figures, thanks", SID)
            assert [(v["target_id"], v["user_id"]) for v in want_user["search_vote"]] == [("d02#0", "u3"),
                                                                                          ("legal:z", "u3")]
            ack = await target.record_feedback("acme", "artifact", "d01", True, "u2")      # u2's vote, flipped
            assert (ack.feedback_helpful, ack.feedback_unhelpful) == (2, 0)
            ack = await target.record_feedback("acme", "entry", "d04#0", True, "u3", search_id=SID)
            assert ack.artifact_id == "d04"                                # the search log checks the vote
            assert [(v.helpful, v.unhelpful) for v in await target.source_votes("acme")] == [(2, 1)]
        # Under another tenant id the user data stays behind unless asked for.
        bare = await import_archive(qdrant, open_archive(first, KEY), "globex", MODEL, keep_groups=True)
        full = await import_archive(back, open_archive(first, KEY), "globex", MODEL, keep_groups=True,
                                    with_user_data=True)
        assert (bare.user_records, full.user_records) == (0, 12)
        assert await _user_data(qdrant, "globex") == dict.fromkeys(USER_KINDS, [])
        assert await _user_data(back, "globex") == await _user_data(source, "acme")
        embedder = HashEmbedder()
        rng = np.random.default_rng(0)
        for q in range(20):
            words = " ".join(rng.choice(WORDS, 3))
            [a], [b] = (await source.dense("acme", await embedder.embed([words]), 10, SearchFilters(), hits=True),
                        await back.dense("acme", await embedder.embed([words]), 10, SearchFilters(), hits=True))
            assert [h.entry.id for h in a] == [h.entry.id for h in b], q
            (a, _), (b, _) = (await source.keyword("acme", words, [], 10, SearchFilters(), hits=True),
                              await back.keyword("acme", words, [], 10, SearchFilters(), hits=True))
            assert [h.entry.id for h in a] == [h.entry.id for h in b], q
    finally:
        qdrant.close()
        back.close()


def _rewritten(path, records: list[dict], version: int) -> None:
    """The archive at `path` rewritten with `records`: its members' SHA-256 and counts (the kinds
    format `version` has) and the MAC made again with the key."""
    manifest = json.loads(path.read_bytes().splitlines()[-2])["manifest"]
    kinds = [k for k in manifest["sha256"] if version >= 3 or k not in USER_KINDS]
    hashes = {kind: hashlib.sha256() for kind in kinds}
    for r in records:
        hashes[r["kind"]].update(_line(r))
    manifest.update(version=version, sha256={k: h.hexdigest() for k, h in hashes.items()},
                    counts={k: sum(r["kind"] == k for r in records) for k in kinds})
    path.write_bytes(b"".join([_line({"format": "nucleus-tenant-archive", "version": version}),
                               *map(_line, records), _line({"manifest": manifest}),
                               _line({"mac": mac_of(KEY, manifest)})]))


def _as_version_1(path) -> int:
    """Rewrite the archive at `path` as format 1 left it: entries without `text_hash` or `span`, no
    user data. Returns the entries it held."""
    records = [json.loads(line) for line in path.read_bytes().splitlines()[1:-2]]
    records = [r for r in records if r["kind"] not in USER_KINDS]
    entries = 0
    for r in records:
        for e in r.get("entries", ()):
            assert len(e.pop("text_hash")) == 24 and len(e.pop("span")) == 2
            entries += 1
    _rewritten(path, records, 1)
    return entries


async def test_a_format_1_archive_imports_with_its_text_hashes_backfilled(source, tmp_path):
    old = tmp_path / "old.archive"
    await _export(source, "acme", old)
    assert _as_version_1(old) > 12
    target = _store(tmp_path / "t")                 # (both backends write an entry through EntryRow)
    try:
        report = await import_archive(target, open_archive(old, KEY), "acme", MODEL)
        _, hits, _ = await _everything(target, "acme")
        assert hits and all(h.entry.text_hash == text_hash(h.entry.text) for h in hits.values())
        assert {h.entry.span_end for h in hits.values()} == {0}          # no span: unknown
        assert report.user_records == 0 and await _user_data(target, "acme") == dict.fromkeys(USER_KINDS, [])
    finally:
        target.close()


async def test_a_format_4_archive_imports_without_the_vote_log_and_may_not_hold_one(source, tmp_path):
    path = tmp_path / "four.archive"
    await _export(source, "acme", path)
    records = [json.loads(line) for line in path.read_bytes().splitlines()[1:-2]]
    _rewritten(path, records, 4)
    with pytest.raises(FailedPrecondition, match="is format 4, which has no feedback records"):
        open_archive(path, KEY)
    _rewritten(path, [r for r in records if r["kind"] not in ("feedback", "search_vote")], 4)
    target = _store(tmp_path / "t")
    try:
        report = await import_archive(target, open_archive(path, KEY), "acme", MODEL)
        got = await _user_data(target, "acme")
        assert report.user_records == 7 and [len(v) for v in got.values()] == [3, 1, 3, 0, 0]
    finally:
        target.close()


def _damaged(path, change):
    data = bytearray(path.read_bytes())
    change(data)
    out = path.with_name("damaged.archive")
    out.write_bytes(bytes(data))
    return out


@pytest.mark.parametrize("how, message", [
    ("flipped byte", "SHA-256"),
    ("truncated", "truncated"),
    ("other key", "another backup key"),
    ("changed manifest", "MAC does not verify"),
])
async def test_a_damaged_or_foreign_archive_is_refused(source, tmp_path, how, message):
    path = tmp_path / "x.archive"
    await _export(source, "acme", path, key=os.urandom(32) if how == "other key" else KEY)
    if how == "flipped byte":
        path = _damaged(path, lambda d: d.__setitem__(d.find(b"volcanic") + 2, d[d.find(b"volcanic") + 2] ^ 0x01))
    elif how == "truncated":
        path = _damaged(path, lambda d: d.__delitem__(slice(len(d) - 100, None)))
    elif how == "changed manifest":
        path = _damaged(path, lambda d: d.__setitem__(slice(None), d.replace(b'"tenant":"acme"', b'"tenant":"acmf"')))
    with pytest.raises(FailedPrecondition, match=message):
        open_archive(path, KEY)


async def test_another_model_and_regrouped_documents_are_refused_before_anything_is_written(source, tmp_path):
    path = tmp_path / "x.archive"
    await _export(source, "acme", path)
    target = _store(tmp_path / "t")
    try:
        archive = open_archive(path, KEY)
        with pytest.raises(FailedPrecondition, match="embedding model 'hash-test'"):
            await import_archive(target, archive, "acme", {"name": "other", "dimension": 384})
        with pytest.raises(FailedPrecondition, match="--keep-groups"):
            await import_archive(target, archive, "globex", MODEL)
        assert target.list_tenants() == []
        assert not list((tmp_path / "t").glob(".import-*"))
        report = await import_archive(target, archive, "globex", MODEL, keep_groups=True)
        assert report.artifacts == 12 and target.list_tenants() == ["globex"]
    finally:
        target.close()


async def test_a_bad_user_data_record_is_refused_with_nothing_written(source, tmp_path):
    path = tmp_path / "x.archive"
    await _export(source, "acme", path)
    good = path.read_bytes()
    target = _store(tmp_path / "t")
    try:
        for kind, change, field in [
                ("vote", {"artifact_id": "gone", "target_id": "gone"}, "artifact_id"),    # not a document of it
                ("search", {"query_sha256": "abc"}, "query_sha256"),
                ("search", {"items": [["d02#0", "d02", 0]]}, "items[0].rank"),
                ("source_vote", {"target_id": "other:x"}, "target_id"),
                ("feedback", {"comment": "x" * 4_001}, "comment"),                  # over-long
                ("search_vote", {"target_id": "d09#0"}, "search_id")]:              # not among its results
            path.write_bytes(good)
            records = [json.loads(line) for line in good.splitlines()[1:-2]]
            at = next(n for n, r in enumerate(records) if r["kind"] == kind)
            records[at].update(change)
            _rewritten(path, records, 5)
            with pytest.raises(InvalidArgument, match=re.escape(f"records[{at}].{field}: ")):
                await import_archive(target, open_archive(path, KEY), "acme", MODEL)
            assert target.list_tenants() == [] and not list((tmp_path / "t").glob(".import-*")), field
        records = [json.loads(line) for line in good.splitlines()[1:-2]]
        at = next(n for n, r in enumerate(records) if r["kind"] == "artifact")
        records[at]["entries"][0]["span"] = [9, 3]                          # an entry's span, backwards
        _rewritten(path, records, 5)
        with pytest.raises(InvalidArgument, match=re.escape("entries[0].span: must be [start, end]")):
            await import_archive(target, open_archive(path, KEY), "acme", MODEL)
        assert target.list_tenants() == []
    finally:
        target.close()


async def _stored(store, tenant) -> list[str]:
    """The artifact ids of every entry point the tenant has on Qdrant, of any generation; the
    embedded store's listing."""
    if not hasattr(store, "_names"):
        return [a for a, _ in await store.archive_listing(tenant, "", 1_000)]
    from qdrant_client import models as qm
    points = await store._scroll({"collection_name": store._names.chunks}, qm.Filter(must=[
        qm.FieldCondition(key="tenant_id", match=qm.MatchValue(value=tenant))]), payload=["artifact_id"])
    return sorted(p.payload["artifact_id"] for p in points)


@pytest.mark.parametrize("backend", ["embedded", "qdrant"])
async def test_an_import_into_a_tenant_with_data_needs_replace_and_a_failure_leaves_it_as_it_was(source, tmp_path,
                                                                                                  backend):
    path = tmp_path / "x.archive"
    await _export(source, "acme", path)
    target = _store(tmp_path / "t", backend)
    try:
        await target.ingest("acme", "", [doc("mine", "a document of the target tenant about glaciers")])
        archive = open_archive(path, KEY)
        with pytest.raises(FailedPrecondition, match="--replace"):
            await import_archive(target, archive, "acme", MODEL)
        bad = _damaged(path, lambda d: None)
        lines = bad.read_bytes().splitlines(keepends=True)
        with pytest.raises(FailedPrecondition, match="changed while it was read"):
            original = open_archive(bad, KEY)
            bad.write_bytes(b"".join(lines[:1] + lines[2:]))     # an artifact gone after verification
            await import_archive(target, original, "acme", MODEL, replace_tenant=True)
        listing, _, _ = await _everything(target, "acme")
        assert [a for a, _ in listing] == ["mine"] == await _stored(target, "acme")    # nothing of the import left
        await import_archive(target, archive, "acme", MODEL, replace_tenant=True)
        listing, _, _ = await _everything(target, "acme")
        assert [a for a, _ in listing] == [d.artifact.artifact_id for d in CORPUS]
        assert sorted(set(await _stored(target, "acme"))) == [a for a, _ in listing]     # the replaced one deleted
    finally:
        target.close()


@pytest.mark.parametrize("backend", ["embedded", "qdrant"])
async def test_readers_see_the_tenant_as_it_was_until_an_import_switches_it_in(source, tmp_path, backend):
    path = tmp_path / "x.archive"
    await _export(source, "acme", path)
    target = _store(tmp_path / "t", backend)
    query = await HashEmbedder().embed(["volcanic ash climate glacier"])
    try:
        await target.ingest("acme", "", [doc("mine", "a document of the target tenant about glaciers")])
        held = target.data_id("acme")

        async def answers():
            listing, hits, _ = await _everything(target, "acme")
            [found] = await target.dense("acme", query, 10, SearchFilters(), hits=True)
            stats, check = await target.stats("acme"), await target.check_tenant("acme", repair=False)
            return ([a for a, _ in listing], sorted(hits), [h.entry.artifact_id for h in found],
                    (stats.artifacts, stats.entries), (check.consistent, check.entries), target.list_tenants())

        before = await answers()
        assert before == (["mine"], ["mine#0"], ["mine"], (1, 1), (True, 1), ["acme"])
        stage = await target.import_stage("acme", True)
        await _write_records(stage.store, "acme", open_archive(path, KEY).records())   # all of it, not switched
        assert await answers() == before and target.data_id("acme") == held
        assert await target.get_entries("acme", ["d01#0"]) == []
        await stage.commit()
        listing, hits, _ = await _everything(target, "acme")
        assert [a for a, _ in listing] == [d.artifact.artifact_id for d in CORPUS] and "mine#0" not in hits
        [found] = await target.dense("acme", query, 10, SearchFilters(), hits=True)
        assert len(found) == 10 and "mine" not in {h.entry.artifact_id for h in found}
        assert (await target.stats("acme")).artifacts == len(CORPUS) and target.data_id("acme") != held
        await target.ingest("acme", "", [doc("later", "a document written after the import")])   # writes go on
        await target.delete("acme", ["d00"])
        listing, _, _ = await _everything(target, "acme")
        assert [a for a, _ in listing] == sorted({d.artifact.artifact_id for d in CORPUS} - {"d00"} | {"later"})
        assert (await target.check_tenant("acme", repair=False)).consistent
    finally:
        target.close()
