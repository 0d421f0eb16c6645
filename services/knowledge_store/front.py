"""The KnowledgeStore's front: every call of the service, once, for all three adapters (gRPC
grpc_api.py, in process inprocess_client.py, MCP mcp_api.py).

Each call takes the verified caller first (None: authentication is off) and holds it to its
tenant and groups with the caller policy (below) before the backend runs; the adapters only establish who
is calling and translate. Retrieval is one call, `retrieve` (a `RetrievalRequest` → a
`Retrieval`), composed here from the backend's primitives (backend.py: `keyword`, `dense`,
`complete`), so adding a retrieval parameter touches the request, this module and the wire.

`CALLS` names every call with its RPC, whether it may be retried (idempotent: a retry of an
attempt that already took effect changes nothing) and whether it is long work (the ingest
deadline instead of the call deadline). The adapters and the clients' retry policy read it.

The KnowledgeStore keeps no audit log: a tenant import (operators only) is recorded as one INFO
line of this module's logger ("tenant archive imported": tenant=, as_tenant=, replace=, the
counts, the operator credential's key id and the backup key's id; never key material).

The caller policy, what the caller of a KnowledgeStore call may do: the store's own check of tenant and groups,
behind the RAGPipeline's (defence in depth, not a second policy — the pipeline decides source
rules and session tags; the store only holds every call to its caller's tenant and groups).

    no verified caller       authentication is off (development stack): served as sent
    operator                 any call; an operator token that names a tenant is held to it
    service for the operator the RAGPipeline serving the verified operator (`for_operator`): a
                             service in every respect except the store's condition, which it
                             reads whole as the operator would (`nucleus status`)
    service (rag_pipeline)   stats and ranking profiles; reads for no user see only what every
                             user of the tenant sees (artifacts without visibility groups)
    on behalf of a user      searches and entries of the user's tenant, filtered to the user's
                             groups inside the search; feedback as that user; named profiles;
                             tenant-wide writes (ingest, delete, index settings, default
                             profiles) only with the admin role

A refusal is PERMISSION_DENIED naming what was needed; an entry the user cannot see is left
out of the answer exactly as a missing one is.
"""
from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterable, AsyncIterator, Callable, Sequence
from dataclasses import replace
from pathlib import Path

import numpy as np

from ranking.profile import RankingProfile
from services.knowledge_store import archive_file, ranking_models, validation
from services.knowledge_store.archive import ImportReport, export_records, import_archive
from services.knowledge_store.backend import StoreBackend
from services.knowledge_store.field_signals import field_signals
from services.knowledge_store.fingerprints import Fingerprints
from services.knowledge_store.keywords import expanded_terms
from services.knowledge_store.models import StoreStatus, TenantCheck
from services.knowledge_store.personas import Persona
from shared import records as m
from shared.errors import InvalidArgument, NotFound, PermissionDenied, Unimplemented
from shared.identity import ADMIN, OPERATOR, Principal, relays_operator
from shared import inprocess
from shared.inprocess import Call
from shared.records import Hit, SearchFilters, SearchLogRecord

def _is_user(p: Principal) -> bool:
    return p.auth_method == "on_behalf_of"


def _tenant(p: Principal | None, requested: str) -> str:
    """The tenant the call acts on: the caller's own when its credential names one."""
    if p is None or not p.tenant_id:
        return requested
    if requested and requested != p.tenant_id:
        raise PermissionDenied(f"tenant_id '{requested}' is not the caller's tenant")
    return p.tenant_id


def read_scope(p: Principal | None, requested: str, filters: SearchFilters) -> tuple[str, SearchFilters]:
    """Tenant and filters of a search or entry read: a user sees only their groups' artifacts."""
    if p is None or p.has_role(OPERATOR):
        return _tenant(p, requested), filters
    groups = p.groups if _is_user(p) else ()       # a service for no user: public artifacts only
    return _tenant(p, requested), replace(filters, visibility_groups=groups, enforce_visibility=True)


def read_tenant(p: Principal | None, requested: str) -> str:
    """The tenant of an entry read or a vote (same rule as a search's)."""
    return read_scope(p, requested, _NO_FILTERS)[0]


_NO_FILTERS = SearchFilters()


def visible(p: Principal | None, hits: list[Hit]) -> list[Hit]:
    """The hits the caller may see (entries fetched by id carry no search filter)."""
    if p is None or p.has_role(OPERATOR):
        return hits
    return [h for h in hits if may_see(p, h.artifact.visibility_groups)]


def may_see(p: Principal | None, visibility_groups: Sequence[str]) -> bool:
    """`visible` for one artifact's visibility groups (none: everyone of the tenant)."""
    if p is None or p.has_role(OPERATOR) or not visibility_groups:
        return True
    return _is_user(p) and bool(set(p.groups) & set(visibility_groups))


def metadata_read(p: Principal | None, requested: str) -> str:
    """Stats and profiles: any authenticated caller, in its own tenant when it has one."""
    return _tenant(p, requested)


def write(p: Principal | None, requested: str, what: str) -> str:
    """Tenant-wide changes: operators, or a user with the admin role (in their tenant)."""
    if p is None or p.has_role(OPERATOR) or (_is_user(p) and p.has_role(ADMIN)):
        return _tenant(p, requested)
    raise PermissionDenied(f"{what} needs the '{ADMIN}' role or an operator credential")


def profile_write(p: Principal | None, requested: str, is_default: bool, name: str) -> str:
    """A tenant's or persona's default profile ranks everyone's searches: admins only. Other
    named profiles are the user's own tuning: any user of the tenant."""
    if is_default or name in ("", "default"):
        return write(p, requested, "changing a default ranking profile")
    if p is not None and not p.has_role(OPERATOR) and not _is_user(p):
        raise PermissionDenied(f"{p.user_id} may write ranking profiles only on behalf of a user")
    return _tenant(p, requested)


def store_status(p: Principal | None) -> str | None:
    """The store's status names every tenant's problems: the whole of it for operators (or with
    authentication off: None), and for a service calling for the operator it verified (the
    console's tenant page); a user with the admin role of a tenant gets that tenant's view
    (`StoreStatus.for_tenant`: the tenant id is returned); anybody else is refused."""
    if p is None or p.has_role(OPERATOR) or relays_operator(p):
        return None
    if _is_user(p) and p.has_role(ADMIN) and p.tenant_id:
        return p.tenant_id
    raise PermissionDenied("the store's status needs an operator credential, or the admin role of a tenant "
                           "(its own tenant's condition)")


def status_view(p: Principal | None, status: Callable[[], StoreStatus]) -> StoreStatus:
    """GetStoreStatus for this caller: `store_status` checked first, then the store's condition
    read whole or as the caller's tenant's view (`StoreStatus.for_tenant`)."""
    tenant = store_status(p)
    whole = status()
    return whole if tenant is None else whole.for_tenant(tenant)


def operator_only(p: Principal | None, what: str) -> None:
    """Backups and restores: the operator (or a stack without authentication) only."""
    if p is not None and not p.has_role(OPERATOR):
        raise PermissionDenied(f"{what} needs an operator credential")


def feedback_user(p: Principal | None, requested_user: str) -> str:
    """Whose vote it is: the asserted user's, never a name in the request."""
    if p is not None and _is_user(p):
        return p.user_id
    if p is not None and not p.has_role(OPERATOR):
        raise PermissionDenied(f"{p.user_id} may record feedback only on behalf of a user")
    return requested_user


def search_record(p: Principal | None, r: SearchLogRecord) -> SearchLogRecord:
    """The search to log (RecordSearch): held to the caller's tenant, and logged as the asserted
    user's; a service or an operator names the user."""
    user = p.user_id if p is not None and _is_user(p) else r.user_id
    return replace(r, tenant_id=read_tenant(p, r.tenant_id), user_id=user)


RPC_SERVICE = "nucleus.v1.KnowledgeStore"
log = logging.getLogger(__name__)


CALLS: dict[str, Call] = {
    "ingest": Call("IngestDocuments", True, long=True),                # by its idempotency key
    "ingest_stream": Call("IngestDocumentsStream", True, long=True),
    "delete": Call("DeleteArtifacts", False),
    "retrieve": Call("Retrieve", True),
    "get_entries": Call("GetEntries", True),
    "get_entries_with_vectors": Call("GetEntries", True),
    "get_peer_entries": Call("GetEntries", True),
    "get_field_signals": Call("GetFieldSignals", True),
    "score_keywords": Call("ScoreKeywords", True),
    "topics": Call("GetTopics", True),
    "stats": Call("GetTenantStats", True),
    "store_status": Call("GetStoreStatus", True),
    "configure_index": Call("ConfigureTenantIndex", True, long=True),
    "check_tenant": Call("CheckTenant", False, long=True),
    "put_profile": Call("PutRankingProfile", False),
    "get_profile": Call("GetRankingProfile", True),
    "list_profiles": Call("ListRankingProfiles", True),
    "put_ranking_model": Call("PutRankingModel", False),
    "get_ranking_model": Call("GetRankingModel", True),
    "put_persona": Call("PutPersona", False),
    "get_persona": Call("GetPersona", True),
    "list_personas": Call("ListPersonas", True),
    "record_feedback": Call("RecordFeedback", False),
    "record_search": Call("RecordSearch", False),
    "record_source_feedback": Call("RecordSourceFeedback", False),
    "source_votes": Call("GetSourceVotes", True),
    "backup_tenants": Call("BackupTenants", False, long=True),
    "restore_tenant": Call("RestoreTenant", False, long=True),
    "export_tenant": Call("ExportTenant", True, long=True),
    "import_tenant": Call("ImportTenant", False, long=True),
}

# The seed RPCs, served by `retrieve` too: idempotent reads.
SEED_READS = ("SearchPersonaKnowledgeByVector", "SearchPersonaKnowledgeByFilters")


def idempotent_methods() -> frozenset[str]:
    """The full gRPC method names a client may retry ("/nucleus.v1.KnowledgeStore/GetEntries")."""
    return inprocess.idempotent_methods(RPC_SERVICE, CALLS, more=tuple(SEED_READS))


#: What an answer of a tenant with rows left out says (tenant-wide: never which rows, which the
#: caller may not be allowed to see).
DAMAGED = "rows of this tenant failed their checksums and are left out"


def damage(store: StoreBackend, tenant_id: str) -> str:
    """DAMAGED while the tenant has rows failing their checksums (health.py "corrupt_rows"), else ""."""
    return DAMAGED if store.health.has(tenant_id, "corrupt_rows") else ""


async def retrieve(store: StoreBackend, r: m.RetrievalRequest) -> m.Retrieval:
    """`r` on `store` (tenant and filters already the caller's): the keyword leg, then the dense
    leg completing the keyword leg's rows, with the query expanded once for both. `degraded` is
    checked after the legs, so the answer whose reads found damage says so."""
    answer = await _retrieve(store, r)
    return replace(answer, degraded=damage(store, r.tenant_id), data_id=store.data_id(r.tenant_id))


async def _retrieve(store: StoreBackend, r: m.RetrievalRequest) -> m.Retrieval:
    if r.vectors is None and not r.keyword:
        raise InvalidArgument("query_vectors", "a retrieval needs query vectors, keywords or both")
    if r.complete and r.hits:
        raise InvalidArgument("complete_scores", "completion answers ranking-signal columns, not hits")
    if r.keyword and len(r.complete_rows):
        raise InvalidArgument("complete_row_ids", "must be empty with the keyword leg (its rows are "
                                                  "completed in the call)")
    weights = await expanded_terms(store, r.tenant_id, r.phrases, (), r.filters, r.feedback_expansion)
    keyword = keyword_hits = None
    terms: list[str] = []
    if r.keyword:
        found, terms = await store.keyword(r.tenant_id, r.phrases, (), r.top_k, r.filters, hits=r.hits,
                                           term_weights=weights)
        keyword_hits, keyword = (tuple(found), None) if r.hits else (None, found)
    if r.vectors is None:
        return m.Retrieval(keyword=keyword, terms=tuple(terms), keyword_hits=keyword_hits)
    vectors = r.vectors             # an array, or the wire's rows (the backend checks both)
    if r.complete:
        rows = keyword.row_ids if keyword is not None else np.asarray(r.complete_rows, np.int64)
        dense, completion = await store.complete(r.tenant_id, vectors, r.top_k, r.filters, keywords=r.phrases,
                                                 complete_rows=rows, term_weights=weights)
        return m.Retrieval(keyword=keyword, terms=tuple(terms), dense=tuple(dense), completion=completion)
    found = await store.dense(r.tenant_id, vectors, r.top_k, r.filters, hits=r.hits)
    if r.hits:
        return m.Retrieval(keyword_hits=keyword_hits, terms=tuple(terms),
                           dense_hits=tuple(tuple(h) for h in found))
    return m.Retrieval(keyword=keyword, terms=tuple(terms), dense=tuple(found))


class StoreFront:
    """Every KnowledgeStore call for a verified caller `p` (module docstring)."""

    def __init__(self, store: StoreBackend) -> None:
        self.store = store
        self.fingerprints = Fingerprints(store)       # each tenant's embedding model (fingerprints.py)

    # -- writes --------------------------------------------------------------------------------
    async def ingest(self, p: Principal | None, tenant_id: str, persona_id: str, documents: Sequence[m.DocumentIn],
                     *, commit_valid: bool = False, key: str = "") -> m.IngestReport:
        tenant = write(p, tenant_id, "ingest")
        fingerprint = await self.fingerprints.before_ingest(tenant)
        report = await self.store.ingest(tenant, persona_id, list(documents), commit_valid=commit_valid, key=key)
        if report.total_entries:
            await self.fingerprints.after_ingest(tenant, fingerprint)
        return report

    async def ingest_stream(self, p: Principal | None, tenant_id: str, persona_id: str,
                            documents: Sequence[m.DocumentIn], *, commit_valid: bool = False, key: str = ""
                            ) -> AsyncIterator[m.IngestProgress | m.IngestReport]:
        """`ingest`, telling its progress: the latest `IngestProgress` whenever it moved (the first,
        0 of n, once the documents are chunked), then the report. A consumer that stops listening
        cancels the ingest (each document is still all or nothing)."""
        tenant = write(p, tenant_id, "ingest")
        fingerprint = await self.fingerprints.before_ingest(tenant)
        latest: list[m.IngestProgress] = []
        moved = asyncio.Event()

        def progress(done: int, expected: int) -> None:
            latest[:] = [m.IngestProgress(done, expected)]
            moved.set()

        work = asyncio.ensure_future(self.store.ingest(tenant, persona_id, list(documents), progress,
                                                       commit_valid=commit_valid, key=key))
        try:
            while not work.done():
                waiting = asyncio.ensure_future(moved.wait())
                await asyncio.wait((work, waiting), return_when=asyncio.FIRST_COMPLETED)
                waiting.cancel()
                moved.clear()
                if latest:
                    yield latest.pop()
            if work.result().total_entries:
                await self.fingerprints.after_ingest(tenant, fingerprint)
            yield work.result()
        finally:
            work.cancel()

    async def delete(self, p: Principal | None, tenant_id: str, artifact_ids: Sequence[str]) -> tuple[int, int]:
        return await self.store.delete(write(p, tenant_id, "delete"), list(artifact_ids))

    # -- reads ---------------------------------------------------------------------------------
    async def retrieve(self, p: Principal | None, request: m.RetrievalRequest) -> m.Retrieval:
        tenant, scoped = read_scope(p, request.tenant_id, request.filters)
        return await retrieve(self.store, replace(request, tenant_id=tenant, filters=scoped))

    async def _visible_entries(self, p: Principal | None, tenant_id: str, entry_ids: Sequence[str]
                               ) -> tuple[str, list[m.Hit]]:
        tenant = read_tenant(p, tenant_id)
        return tenant, visible(p, await self.store.get_entries(tenant, list(entry_ids)))

    async def get_entries(self, p: Principal | None, tenant_id: str, entry_ids: Sequence[str]) -> list[m.Hit]:
        return (await self._visible_entries(p, tenant_id, entry_ids))[1]

    def data_id(self, p: Principal | None, tenant_id: str) -> str:
        """Which copy of the caller's tenant's data is served (StoreBackend.data_id)."""
        return self.store.data_id(read_tenant(p, tenant_id))

    async def get_entries_with_vectors(self, p: Principal | None, tenant_id: str, entry_ids: Sequence[str]
                                       ) -> tuple[list[m.Hit], list[np.ndarray | None]]:
        """The entries the caller may see, and each one's stored unit vector (None: none held)."""
        tenant, hits = await self._visible_entries(p, tenant_id, entry_ids)
        found = await self.store.entry_vectors(tenant, [h.entry.id for h in hits]) if hits else {}
        return hits, [found.get(h.entry.id) for h in hits]

    async def get_peer_entries(self, p: Principal | None, tenant_id: str, entry_ids: Sequence[str]) -> m.PeerEntries:
        """`get_entries_with_vectors` and each entry's analysed (title, body) terms."""
        hits, vectors = await self.get_entries_with_vectors(p, tenant_id, entry_ids)
        tenant = read_tenant(p, tenant_id)
        found = await self.store.entry_terms(tenant, [h.entry.id for h in hits]) if hits else {}
        return m.PeerEntries(hits, vectors, [found.get(h.entry.id) for h in hits])

    async def get_field_signals(self, p: Principal | None, tenant_id: str, entry_ids: Sequence[str], query: str,
                                query_vector: np.ndarray) -> m.FieldSignals:
        return await field_signals(self.store, read_tenant(p, tenant_id), list(entry_ids), query,
                                   query_vector, may_see=lambda groups: may_see(p, groups))

    async def score_keywords(self, p: Principal | None, tenant_id: str, keywords: m.Keywords,
                             extra_keywords: Sequence[str], texts: Sequence[tuple[str, str] | m.AnalysedText]
                             ) -> m.KeywordScores:
        return await self.store.score_texts(read_tenant(p, tenant_id), keywords, list(extra_keywords),
                                            [t if isinstance(t, m.AnalysedText) else (t[0], t[1]) for t in texts])

    async def topics(self, p: Principal | None, tenant_id: str, filters: m.SearchFilters, kind: str, *, k: int = 0,
                     max_terms: int = 0, examples: int = 0, period: str = "", date_field: str = "",
                     topic_id: int | None = None, query_vector: np.ndarray | None = None, limit: int = 0,
                     max_points: int = 0) -> dict:
        """The tenant's topics as the caller sees them; 0 / "" = the defaults named here."""
        tenant, scoped = read_scope(p, tenant_id, filters)
        vector = np.asarray(query_vector, np.float32).ravel().tolist() if query_vector is not None else []
        return await self.store.topics(
            tenant, scoped, kind or "topics", k=k, max_terms=max_terms or 8,
            examples=0 if examples < 0 else (examples or 3), period=period or "month",
            date_field=date_field or "created", topic_id=topic_id, query_vector=vector or None,
            limit=limit or 10, max_points=max_points or 2_000)

    # -- tenant metadata, maintenance ----------------------------------------------------------
    async def stats(self, p: Principal | None, tenant_id: str) -> m.TenantStats:
        return await self.store.stats(metadata_read(p, tenant_id))

    async def store_status(self, p: Principal | None) -> StoreStatus:
        """All of the store's condition for operators, one tenant's for its admin."""
        return status_view(p, self.store.status)

    async def configure_index(self, p: Principal | None, tenant_id: str, kind: str, **params: int) -> tuple[str, int]:
        return await self.store.configure_index(write(p, tenant_id, "index settings"), kind,
                                                **{k: v for k, v in params.items() if v})

    async def check_tenant(self, p: Principal | None, tenant_id: str, *, repair: bool = True) -> TenantCheck:
        return await self.store.check_tenant(write(p, tenant_id, "a consistency check"), repair=repair)

    def _embedded_only(self, name: str):
        method = getattr(self.store, name, None)
        if method is None:
            raise Unimplemented(f"{name.replace('_', ' ')} is the embedded backend's; on the Qdrant backend use "
                                "Qdrant's snapshots (docs/OPERATIONS.md, \"Backups\")")
        return method

    async def backup_tenants(self, p: Principal | None, tenant_ids: Sequence[str], directory: str,
                             final_directory: str = "") -> list:
        operator_only(p, "a backup")
        return await self._embedded_only("backup")(list(tenant_ids), Path(directory),
                                                   Path(final_directory or directory))

    async def restore_tenant(self, p: Principal | None, tenant_id: str, file: str, sha256: str) -> tuple:
        operator_only(p, "a restore")
        return await self._embedded_only("restore_tenant")(tenant_id, Path(file), sha256)

    # -- tenant archives (archive.py, archive_file.py) ----------------------------------------
    async def _model(self, tenant_id: str = "") -> dict:
        """The serving model's name, dimension and fingerprint; with `tenant_id`, that tenant's
        fingerprint instead (fingerprints.py)."""
        fingerprint = await (self.fingerprints.of_tenant(tenant_id) if tenant_id else self.fingerprints.serving())
        return {"name": await self.store.embedder.model_name(), "dimension": self.store.dimension,
                "fingerprint": fingerprint}

    async def export_tenant(self, p: Principal | None, tenant_id: str, backup_key: bytes) -> AsyncIterator[bytes]:
        """The tenant as an archive file MAC'd with `backup_key`, in chunks: written whole to a
        0600 file in the store's data directory first (a failure sends no byte), removed after."""
        operator_only(p, "a tenant export")
        key = archive_file.check_key(backup_key)
        validation.tenant_id(tenant_id)
        if tenant_id not in await asyncio.to_thread(self.store.list_tenants):
            raise NotFound(f"tenant '{tenant_id}' not found")
        model = await self._model(tenant_id)
        with archive_file.scratch(self.store.data_dir, "export") as path:
            await archive_file.write_archive(path, key, tenant_id, model, export_records(self.store, tenant_id))
            for chunk in archive_file.chunks_of(path):
                yield chunk

    async def import_tenant(self, p: Principal | None, chunks: AsyncIterable[bytes], backup_key: bytes, *,
                            as_tenant: str = "", replace: bool = False, keep_groups: bool = False,
                            with_user_data: bool = False, reembed: bool = False) -> ImportReport:
        """The archive streamed in as `chunks`, received into a 0600 file in the store's data
        directory, verified with `backup_key` (the key of the stack that made it) and imported into
        `as_tenant` (default its own tenant) all or nothing; the file is removed after. `reembed`:
        the entries are embedded again by the serving model (an archive of another or an unknown
        model). User data (votes, the search log, source votes) is imported under the archive's own
        tenant, under another only with `with_user_data`."""
        operator_only(p, "a tenant import")
        key = archive_file.check_key(backup_key)
        if as_tenant:
            validation.tenant_id(as_tenant, "as_tenant")
        with archive_file.scratch(self.store.data_dir, "import") as path:
            await archive_file.receive(path, chunks)
            archive = await asyncio.to_thread(archive_file.open_archive, path, key)
            tenant = as_tenant or archive.manifest["tenant"]
            try:
                report = await import_archive(self.store, archive, tenant, await self._model(), replace_tenant=replace,
                                              keep_groups=keep_groups, reembed=reembed,
                                              with_user_data=with_user_data)
            finally:
                self.fingerprints.forget(tenant)
        log.info("tenant archive imported: tenant=%s as_tenant=%s replace=%s reembed=%s with_user_data=%s "
                 "artifacts=%d entries=%d profiles=%d personas=%d user_records=%d operator_key_id=%s "
                 "backup_key_id=%s", archive.manifest["tenant"], tenant, replace, reembed, with_user_data,
                 report.artifacts, report.entries, report.profiles, report.personas, report.user_records,
                 p.key_id if p is not None else "(authentication off)", archive_file.key_id(key))
        return report

    # -- profiles, models, personas ------------------------------------------------------------
    async def put_profile(self, p: Principal | None, profile: RankingProfile) -> RankingProfile:
        tenant = profile_write(p, profile.tenant_id, profile.is_default, profile.name)
        return await self.store.put_profile(replace(profile, tenant_id=tenant))

    async def get_profile(self, p: Principal | None, tenant_id: str, persona_id: str, name: str,
                          version: int = 0) -> RankingProfile:
        tenant = metadata_read(p, tenant_id)
        profile = await self.store.get_profile(tenant, persona_id, name, version)
        if profile is None:
            raise NotFound(f"no ranking profile '{name or 'default'}' for tenant '{tenant}'"
                           + (f" persona '{persona_id}'" if persona_id else ""))
        return profile

    async def list_profiles(self, p: Principal | None, tenant_id: str, persona_id: str = "") -> list[RankingProfile]:
        return await self.store.list_profiles(metadata_read(p, tenant_id), persona_id)

    async def put_ranking_model(self, p: Principal | None, tenant_id: str, raw: bytes,
                                profile: RankingProfile | None = None) -> tuple[str, RankingProfile | None]:
        return await self.store.put_ranking_model(write(p, tenant_id, "storing a ranking model"), raw,
                                                  profile)

    async def get_ranking_model(self, p: Principal | None, tenant_id: str, sha256: str) -> bytes:
        tenant = metadata_read(p, tenant_id)
        return ranking_models.served(await self.store.get_ranking_model(tenant, sha256), tenant, sha256)

    async def put_persona(self, p: Principal | None, persona: Persona) -> Persona:
        tenant = write(p, persona.tenant_id, "changing a persona")
        return await self.store.put_persona(replace(persona, tenant_id=tenant))

    async def get_persona(self, p: Principal | None, tenant_id: str, persona_id: str) -> Persona:
        return await self.store.get_persona(metadata_read(p, tenant_id), persona_id)

    async def list_personas(self, p: Principal | None, tenant_id: str) -> list[Persona]:
        return await self.store.list_personas(metadata_read(p, tenant_id))

    # -- feedback and the search log -----------------------------------------------------------
    async def record_feedback(self, p: Principal | None, tenant_id: str, target: str, target_id: str, helpful: bool,
                              user_id: str, *, search_id: str = "") -> m.FeedbackAck:
        if target not in ("entry", "artifact"):
            raise InvalidArgument("target", "must be FEEDBACK_TARGET_ENTRY or FEEDBACK_TARGET_ARTIFACT")
        tenant, user = read_tenant(p, tenant_id), feedback_user(p, user_id)
        if not search_id and not await self._may_see_target(p, tenant, target, target_id):
            # a target the caller may not see is answered as a missing one (a vote in a search is
            # checked against the caller's own results by the store, which refuses it either way)
            raise NotFound(f"{target} '{target_id}' not found in tenant '{tenant}'")
        return await self.store.record_feedback(tenant, target, target_id, helpful, user, search_id=search_id)

    async def _may_see_target(self, p: Principal | None, tenant: str, target: str, target_id: str) -> bool:
        """False only for a stored target hidden from `p` (an unknown or malformed one: the store answers)."""
        if p is None or p.has_role(OPERATOR):
            return True
        try:
            hits = await self.store.get_entries(tenant, [target_id if target == "entry" else f"{target_id}#0"])
        except (InvalidArgument, NotFound):
            return True
        return not hits or bool(visible(p, hits))

    async def record_search(self, p: Principal | None, record: m.SearchLogRecord) -> None:
        await self.store.record_search(search_record(p, record))

    async def record_source_feedback(self, p: Principal | None, tenant_id: str, source_id: str, target_id: str,
                                     helpful: bool, user_id: str, *, search_id: str = "") -> m.SourceVotes:
        return await self.store.record_source_feedback(read_tenant(p, tenant_id), source_id, target_id,
                                                       helpful, feedback_user(p, user_id), search_id=search_id)

    async def source_votes(self, p: Principal | None, tenant_id: str) -> list[m.SourceVotes]:
        return await self.store.source_votes(read_tenant(p, tenant_id))


__all__ = [
    "CALLS",
    "Call",
    "StoreFront",
    "feedback_user",
    "idempotent_methods",
    "metadata_read",
    "profile_write",
    "read_scope",
    "read_tenant",
    "retrieve",
    "search_record",
    "status_view",
    "store_status",
    "visible",
    "write",
]
