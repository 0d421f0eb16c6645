"""A tenant as a backend-neutral record stream, and that stream written back: the store's half of
the portable tenant archive (the file and its MAC: archive_file.py; docs/OPERATIONS.md, "Tenant
archives").

    export_records   the tenant read through the backend's read primitives (`archive_listing`
                     for the artifacts and their entry ids, then `get_entries`, `entry_terms`,
                     `entry_vectors`, `title_vectors`; profiles of every version with the models
                     they name; personas) as JSON-ready records, one artifact a record
    import_archive   a verified archive written into a tenant: refused first for another model
                     (name, dimension, or a model fingerprint other than the serving model's, or
                     `unknown`: fingerprints.py) unless `reembed`, and for grouped documents under
                     another tenant without `keep_groups`; then every record checked by the write
                     validators (artifact metadata, entry ids, profiles, personas, each vector's
                     dimension, finiteness and unit norm) and written with its stored vectors
                     (`reembed`: vectors of the serving model, from each entry's text as ingest
                     embedded it) through the backend's `import_stage`: the embedded backend builds
                     the tenant aside and swaps it in, the qdrant backend writes a new generation
                     of the tenant and switches it in with one write (qdrant/archive.py). A failure
                     part-way leaves the tenant as it was. The tenant records the archive's fingerprint (`reembed`: the
                     serving model's).

User data (format 3, 5; archive_file.py USER_KINDS), after the artifacts: each user's current vote
per artifact (`vote`), the search log (`search`), each user's vote per federated source
(`source_vote`) and, since format 5, the vote log (`feedback`: every vote ever cast on a document,
with its comment, time and the search it named; archive_file.vote_log) and the votes that named
a search (`search_vote`: search, target, user -> answer, time), read and written through the
backend's `user_data` / `put_user_data`. Imported under the archive's own tenant; under another
tenant only with `with_user_data` (left out otherwise). Checked like the writes that make them: a
vote and a vote of the log by validation.feedback (target, user, comment) and naming an artifact
of the archive, a search by search_log.record (and at most MAX_SEARCHES_PER_TENANT), a source vote
by search_log.source_vote, a vote naming a search by search_log.check_vote against the archive's
search log at the vote's time. Each artifact's feedback counters travel with it; the log is
written as it is, counting nothing again, so counters and current votes equal the source's.
"""
from __future__ import annotations

import base64
from collections.abc import AsyncIterator, Iterator
from dataclasses import asdict, dataclass, fields, replace

import numpy as np

from ranking.profile import RankingProfile
from services.knowledge_store import ranking_models, search_log, validation
from services.knowledge_store.archive_file import USER_KINDS, Archive
from services.knowledge_store.backend import StoreBackend
from services.knowledge_store.fingerprints import UNKNOWN
from services.knowledge_store.personas import Persona
from services.knowledge_store.preparation import EntryRow, PreparedDocument, derived_rows
from shared.errors import FailedPrecondition, InvalidArgument
from shared.records import ARTIFACT_FIELDS, ArtifactMeta, SearchLogItem, SearchLogRecord

BATCH = 256                    # artifacts per read and per write
NORM_TOLERANCE = 1e-3          # a stored vector is a unit vector
EMBED_BATCH = 128              # texts per embed call of `reembed` (as ingest's embed_batch_size)
_PROFILE_FIELDS = tuple(f.name for f in fields(RankingProfile) if f.name != "tenant_id")


@dataclass(frozen=True, slots=True)
class ImportReport:
    tenant_id: str
    artifacts: int
    entries: int
    profiles: int
    personas: int
    user_records: int = 0      # user data records imported (USER_KINDS)


def _b64(vector: np.ndarray) -> str:
    return base64.b64encode(np.ascontiguousarray(vector, "<f4").tobytes()).decode()


def _vector(text: str, dimension: int, field: str) -> np.ndarray:
    try:
        v = np.frombuffer(base64.b64decode(text, validate=True), "<f4").astype(np.float32)
    except (ValueError, TypeError):
        raise InvalidArgument(field, "is not a base64 float32 vector") from None
    if v.shape != (dimension,):
        raise InvalidArgument(field, f"has {v.size} dimensions, the store's vectors have {dimension}")
    if not np.isfinite(v).all():
        raise InvalidArgument(field, "contains NaN or infinity")
    if abs(float(np.linalg.norm(v)) - 1.0) > NORM_TOLERANCE:
        raise InvalidArgument(field, f"is not a unit vector (norm {float(np.linalg.norm(v)):.4f})")
    return v


# ---------------------------------------------------------------------------- export
async def export_records(store: StoreBackend, tenant_id: str) -> AsyncIterator[dict]:
    """The tenant's records (module docstring), artifacts in artifact id order."""
    validation.tenant_id(tenant_id)
    after = ""
    while listing := await store.archive_listing(tenant_id, after, BATCH):
        after = listing[-1][0]
        ids = [e for _, entry_ids in listing for e in entry_ids]
        hits, vectors, terms = {}, {}, {}
        for start in range(0, len(ids), 256):
            part = ids[start:start + 256]
            hits.update((h.entry.id, h) for h in await store.get_entries(tenant_id, part))
            vectors.update(await store.entry_vectors(tenant_id, part))
            terms.update(await store.entry_terms(tenant_id, part))
        titles = await store.title_vectors(tenant_id, [a for a, _ in listing])
        for artifact_id, entry_ids in listing:
            present = [hits[e] for e in entry_ids if e in hits and e in vectors and e in terms]
            if not present:
                continue
            first = present[0]
            title = titles.get(artifact_id)
            yield {"kind": "artifact", "persona_id": first.entry.persona_id,
                   "artifact": {f: _plain(getattr(first.artifact, f)) for f in ARTIFACT_FIELDS},
                   "feedback": [first.artifact.feedback_helpful, first.artifact.feedback_unhelpful],
                   "title_vector": None if title is None else _b64(title),
                   "entries": [{"chunk_index": h.entry.chunk_index, "text": h.entry.text, "headline": h.entry.headline,
                                "content_summary": h.entry.content_summary, "timestamp_unix": h.entry.timestamp_unix,
                                "richness": h.entry.richness, "text_hash": h.entry.text_hash,
                                **({"span": [h.entry.span_start, h.entry.span_end]} if h.entry.span_end else {}),
                                "title_terms": terms[h.entry.id][0],
                                "body_terms": terms[h.entry.id][1], "vector": _b64(vectors[h.entry.id])}
                               for h in present]}
    for latest in sorted(await store.list_profiles(tenant_id), key=lambda p: (p.persona_id, p.name)):
        for version in range(1, latest.version + 1):
            p = await store.get_profile(tenant_id, latest.persona_id, latest.name, version)
            if p is None or p.version != version or p.persona_id != latest.persona_id:
                continue
            raw = await store.get_ranking_model(tenant_id, p.model_sha256) if p.model_sha256 else None
            yield {"kind": "profile", "profile": {f: getattr(p, f) for f in _PROFILE_FIELDS},
                   "model": None if raw is None else base64.b64encode(raw).decode()}
    for persona in await store.list_personas(tenant_id):
        yield {"kind": "persona", "persona": {k: _plain(v) for k, v in asdict(persona).items() if k != "tenant_id"}}
    for kind in USER_KINDS:
        for record in await store.user_data(tenant_id, kind):
            yield record


def _plain(value):
    return list(value) if isinstance(value, tuple) else value


# ---------------------------------------------------------------------------- import
def check_archive(archive: Archive, tenant_id: str, model: dict, *, keep_groups: bool, reembed: bool = False) -> None:
    """The refusals before anything is written (module docstring). `model`: the serving model's
    name, dimension and fingerprint (without one: not compared)."""
    m = archive.manifest
    theirs = m["model"].get("fingerprint") or UNKNOWN
    if reembed:
        pass
    elif m["model"].get("dimension") != model.get("dimension") or m["model"].get("name") != model.get("name"):
        raise FailedPrecondition(f"archive {archive.path} was made with embedding model {m['model'].get('name')!r} "
                                 f"({m['model'].get('dimension')} dimensions); this store's is {model.get('name')!r} "
                                 f"({model.get('dimension')}): its vectors cannot be searched here: import it with "
                                 "--reembed, or refused")
    elif "fingerprint" in model and theirs != (model["fingerprint"] or UNKNOWN):
        which = ("an unknown model (its tenant's vectors could not be reproduced by the model that served it)"
                 if theirs == UNKNOWN else f"a model of fingerprint {theirs}")
        raise FailedPrecondition(f"archive {archive.path} holds vectors of {which}; this store's model's fingerprint "
                                 f"is {model['fingerprint']}: import it with --reembed to embed its texts again: "
                                 "refused")
    if tenant_id != m["tenant"] and m.get("grouped_artifacts") and not keep_groups:
        raise FailedPrecondition(
            f"archive {archive.path} holds {m['grouped_artifacts']} documents of tenant '{m['tenant']}' visible to "
            f"groups only; under tenant '{tenant_id}' those groups may mean other people: pass --keep-groups to "
            "keep them as they are: refused")


async def import_archive(store: StoreBackend, archive: Archive, tenant_id: str, model: dict, *,
                         replace_tenant: bool = False, keep_groups: bool = False, reembed: bool = False,
                         with_user_data: bool = False) -> ImportReport:
    """Write the verified `archive` into `tenant_id` (module docstring); all or nothing. User data
    under the archive's own tenant, or with `with_user_data`."""
    validation.tenant_id(tenant_id)
    check_archive(archive, tenant_id, model, keep_groups=keep_groups, reembed=reembed)
    stage = await store.import_stage(tenant_id, replace_tenant)
    try:
        report = await _write_records(stage.store, tenant_id, archive.records(), store.embedder if reembed else None,
                                      user_data=with_user_data or tenant_id == archive.manifest["tenant"])
        fingerprint = model.get("fingerprint") if reembed else archive.manifest["model"].get("fingerprint")
        if fingerprint:                 # none recorded in the source (nucleus migrate): decided here later
            await stage.store.set_tenant_fingerprint(tenant_id, fingerprint)
        await stage.commit()
    except BaseException:
        await stage.abort()
        raise
    return report


async def _write_records(store: StoreBackend, tenant_id: str, records: Iterator[dict], embedder=None, *,
                         user_data: bool = True) -> ImportReport:
    """`embedder`: the vectors are embedded again with it (`reembed`), the archived ones ignored.
    `user_data`: False leaves the user data records out (each still checked)."""
    counts = dict.fromkeys(("artifact", "entries", "profile", "persona", *USER_KINDS), 0)
    batch: list[tuple[str, PreparedDocument, np.ndarray, np.ndarray | None, tuple[int, int]]] = []
    artifacts: set[str] = set()
    searches: dict[str, SearchLogRecord] = {}        # the archive's search log, which search votes name
    users: dict[str, list[dict]] = {k: [] for k in USER_KINDS}

    async def flush(*kinds: str) -> None:
        for k in kinds:
            if users[k] and user_data:
                await store.put_user_data(tenant_id, k, users[k])
            users[k] = []

    for n, record in enumerate(records):
        kind = record.get("kind")
        if kind in USER_KINDS:
            if batch:                          # the artifacts a vote names are written first
                await store.put_archived(tenant_id, await _reembedded(batch, embedder, store.dimension))
                batch = []
            await flush(*(k for k in USER_KINDS if k != kind))     # and the records of the kinds before
            users[kind].append(_user_record(record, tenant_id, artifacts, searches, f"records[{n}]"))
            if kind == "search" and counts[kind] >= search_log.MAX_SEARCHES_PER_TENANT:
                raise InvalidArgument(f"records[{n}]", f"more than {search_log.MAX_SEARCHES_PER_TENANT} searches, "
                                                       "the most a tenant's search log keeps")
            if len(users[kind]) >= BATCH * 4:
                await flush(kind)
        elif kind == "artifact":
            batch.append(_artifact(record, store.dimension, f"records[{n}]", len(batch), embedder is None))
            artifacts.add(batch[-1][1].meta.artifact_id)
            counts["entries"] += len(batch[-1][1].rows)
            if len(batch) >= BATCH:
                await store.put_archived(tenant_id, await _reembedded(batch, embedder, store.dimension))
                batch = []
        elif kind == "profile":
            await _put_profile(store, tenant_id, record, f"records[{n}]")
        elif kind == "persona":
            await store.put_persona(Persona(tenant_id=tenant_id, **_persona_fields(record["persona"])))
        else:
            raise InvalidArgument(f"records[{n}].kind", f"{kind!r} is not one of artifact, profile, persona, "
                                                        f"{', '.join(USER_KINDS)}")
        counts[kind] += 1
    if batch:
        await store.put_archived(tenant_id, await _reembedded(batch, embedder, store.dimension))
    await flush(*USER_KINDS)
    return ImportReport(tenant_id, counts["artifact"], counts["entries"], counts["profile"], counts["persona"],
                        sum(counts[k] for k in USER_KINDS) if user_data else 0)


_USER_FIELDS = {"vote": ("artifact_id", "user_id", "helpful", "target", "target_id", "updated_unix"),
                "search": ("search_id", "user_id", "created_unix", "query_sha256", "items"),
                "source_vote": ("source_id", "user_id", "helpful", "target_id", "updated_unix"),
                "feedback": ("artifact_id", "target", "target_id", "user_id", "helpful", "comment", "created_unix",
                             "search_id"),
                "search_vote": ("search_id", "target_id", "user_id", "helpful", "created_unix")}


def _user_record(record: dict, tenant_id: str, artifacts: set[str], searches: dict[str, SearchLogRecord],
                 field: str) -> dict:
    """A user data record checked as the write that makes it checks it (module docstring).
    `artifacts`: the archive's artifact ids; `searches`: its searches so far (a search record
    checked here is added)."""
    kind = record["kind"]
    names = _USER_FIELDS[kind]
    if set(record) != {"kind", *names}:
        raise InvalidArgument(field, f"a {kind} record has the fields {', '.join(names)}")
    r = {k: record[k] for k in names}
    try:
        for name in names:
            if name in ("helpful",) and not isinstance(r[name], bool):
                raise InvalidArgument(name, "must be true or false")
            if name.endswith("_unix") and (not isinstance(r[name], int) or isinstance(r[name], bool) or r[name] <= 0):
                raise InvalidArgument(name, "must be a positive unix time")
            if name not in ("helpful", "items") and not name.endswith("_unix") and not isinstance(r[name], str):
                raise InvalidArgument(name, "must be a string")
        if kind in ("vote", "feedback"):
            # a vote of the log cast before votes needed a user (store schema 1) has none
            user = r["user_id"] or ("" if kind == "vote" else "anonymous")
            validation.feedback(r["target"], r["target_id"], user, r.get("comment", ""))
            of = r["target_id"] if r["target"] == "artifact" else r["target_id"].rsplit("#", 1)[0]
            if of != r["artifact_id"] or of not in artifacts:
                raise InvalidArgument("artifact_id", f"'{r['artifact_id']}' is not a document of the archive the "
                                                     f"vote's target '{r['target_id']}' belongs to")
        if kind in ("feedback", "search_vote") and (r["search_id"] or kind == "search_vote"):
            if kind == "search_vote" and not r["user_id"].strip():
                raise InvalidArgument("user_id", "is required: a vote naming a search is a user's")
            search_log.check_vote(searches.get(search_log.search_id(r["search_id"])), r["search_id"], r["user_id"],
                                  r["target_id"], r["created_unix"])
        elif kind == "search":
            items = r["items"]
            if not isinstance(items, list) or not all(
                    isinstance(i, list) and len(i) == 3 and isinstance(i[2], int) for i in items):
                raise InvalidArgument("items", "must be a list of [entry id, artifact id, rank]")
            searches[r["search_id"]] = search_log.record(SearchLogRecord(
                tenant_id, r["search_id"], r["user_id"], r["created_unix"], r["query_sha256"],
                tuple(SearchLogItem(str(e), str(a), int(k)) for e, a, k in items)))
        elif kind == "source_vote":
            search_log.source_vote(r["source_id"], r["target_id"], r["user_id"])
    except InvalidArgument as e:
        raise InvalidArgument(f"{field}.{e.field}", e.message.split(": ", 1)[-1]) from None
    return r


async def _reembedded(batch: list, embedder, dimension: int) -> list:
    """`batch` with the vectors of `embedder` (None: as it is): each entry's from the text ingest
    embedded it from, each non-empty title's from the title."""
    if embedder is None:
        return batch
    texts = [derived_rows(p.meta.title, r.headline, r.text)[2] for _, p, _, _, _ in batch for r in p.rows]
    titles = [p.meta.title for _, p, _, _, _ in batch if p.meta.title.strip()]
    inputs = texts + titles
    got = np.concatenate([np.asarray(await embedder.embed(inputs[i:i + EMBED_BATCH]), np.float32).reshape(
        -1, dimension) for i in range(0, len(inputs), EMBED_BATCH)]) if inputs else np.zeros((0, dimension))
    if got.shape != (len(texts) + len(titles), dimension) or not np.isfinite(got).all():
        raise FailedPrecondition(f"re-embedding gave vectors of shape {got.shape}, the store's have {dimension} "
                                 "dimensions: nothing imported")
    got = got / np.maximum(np.linalg.norm(got, axis=1, keepdims=True), 1e-12)
    out, at, title_at = [], 0, len(texts)
    for persona, p, _, _, feedback in batch:
        title = None
        if p.meta.title.strip():
            title, title_at = got[title_at], title_at + 1
        out.append((persona, p, got[at:at + len(p.rows)], title, feedback))
        at += len(p.rows)
    return out


def _artifact(record: dict, dimension: int, field: str, index: int, vectors_too: bool = True
              ) -> tuple[str, PreparedDocument, np.ndarray, np.ndarray | None, tuple[int, int]]:
    a = record["artifact"]
    meta = ArtifactMeta(**{f: tuple(a[f]) if isinstance(a[f], list) else a[f] for f in ARTIFACT_FIELDS})
    validation.artifact(meta, f"{field}.artifact")
    persona = validation.persona_id(record["persona_id"], f"{field}.persona_id")
    rows, vectors = [], []
    for k, e in enumerate(record["entries"]):
        validation.entry_id(f"{meta.artifact_id}#{e['chunk_index']}", f"{field}.entries[{k}].chunk_index")
        rows.append(EntryRow(chunk_index=int(e["chunk_index"]), text=str(e["text"]), headline=str(e["headline"]),
                             content_summary=str(e["content_summary"]), timestamp_unix=int(e["timestamp_unix"]),
                             richness=float(e["richness"]), fts_title=str(e["title_terms"]),
                             fts_body=str(e["body_terms"]), text_hash=_text_hash(e, f"{field}.entries[{k}]"),
                             **_span(e, f"{field}.entries[{k}]")))
        if vectors_too:
            vectors.append(_vector(e["vector"], dimension, f"{field}.entries[{k}].vector"))
    if not rows:
        raise InvalidArgument(f"{field}.entries", "an artifact needs at least one entry")
    if len({r.chunk_index for r in rows}) != len(rows):
        raise InvalidArgument(f"{field}.entries", "chunk indexes repeat")
    title = record.get("title_vector") if vectors_too else None
    title_vector = None if title is None else _vector(title, dimension, f"{field}.title_vector")
    helpful, unhelpful = (int(x) for x in record.get("feedback", (0, 0)))
    if helpful < 0 or unhelpful < 0:
        raise InvalidArgument(f"{field}.feedback", "counts must be >= 0")
    return (persona, PreparedDocument(meta, index, tuple(rows), ()),
            np.stack(vectors) if vectors else np.zeros((0, dimension), np.float32), title_vector, (helpful, unhelpful))


def _text_hash(entry: dict, field: str) -> str:
    """An archived entry's text hash: format 2 carries it (checked to be one), format 1 does not (""
    = computed from the text when written: the backfill)."""
    value = entry.get("text_hash") or ""
    if value and not (isinstance(value, str) and len(value) == 24 and set(value) <= set("0123456789abcdef")):
        raise InvalidArgument(f"{field}.text_hash", "must be 24 lower-case hex digits (shared/text_hash.py) or absent")
    return value


def _span(entry: dict, field: str) -> dict[str, int]:
    """An archived entry's span in its document (format 4, when known); none before."""
    value = entry.get("span")
    if value is None:
        return {}
    if not (isinstance(value, list) and len(value) == 2 and all(type(v) is int for v in value)
            and 0 <= value[0] < value[1]):
        raise InvalidArgument(f"{field}.span", "must be [start, end] with 0 <= start < end, or absent")
    return {"span_start": value[0], "span_end": value[1]}


async def _put_profile(store: StoreBackend, tenant_id: str, record: dict, field: str) -> None:
    data = record["profile"]
    unknown = set(data) - set(_PROFILE_FIELDS)
    if unknown:
        raise InvalidArgument(f"{field}.profile", f"unknown fields {', '.join(sorted(unknown))}")
    profile = RankingProfile(tenant_id=tenant_id, **data)
    validation.profile(profile)
    untuned = replace(profile, version=0, model_sha256="", feature_version=0)
    if record.get("model"):
        raw = base64.b64decode(record["model"])
        sha, _ = ranking_models.check_model(raw)
        if sha != profile.model_sha256:
            raise InvalidArgument(f"{field}.model", f"its SHA-256 is {sha}, the profile names {profile.model_sha256}")
        await store.put_ranking_model(tenant_id, raw, untuned)
    else:
        await store.put_profile(untuned)


def _persona_fields(data: dict) -> dict:
    names = {f.name for f in fields(Persona)} - {"tenant_id"}
    unknown = set(data) - names
    if unknown:
        raise InvalidArgument("persona", f"unknown fields {', '.join(sorted(unknown))}")
    validation.persona_id(data.get("persona_id", ""))
    return {k: tuple(v) if isinstance(v, list) else v for k, v in data.items()}
