"""Between the RAG tools' pydantic models and the core's types: results as segments and hits,
sources as resources, ISO 8601 times both ways, the search filters of rag_get_raw_results, and
the worst of several per-source errors."""
from __future__ import annotations

import datetime as dt
from typing import Literal

from services.llm_orchestration.results import Synthesis
from services.rag_pipeline.access import SourceView
from services.rag_pipeline.federation.discover import RemoteResources
from services.rag_pipeline.federation.hits import LOCAL, SourceReport
from services.rag_pipeline.merge import duplicate_values
from services.rag_pipeline.models import RankedResult
from services.rag_pipeline.results import highlights
from services.rag_pipeline.tools.schemas import (
    HEADLINE_WORDS,
    CountsOut,
    DuplicateOut,
    ErrorOut,
    HitOut,
    MetaOut,
    ProvenanceOut,
    RawFiltersIn,
    ResourceOut,
    ScoresOut,
    SegmentOut,
    SourceErrorOut,
    SourceStatusOut,
)
from shared.errors import MAX_UNIX_TIME
from shared.errors import InvalidArgument
from shared.identity import Principal
from shared.mcp_errors import ErrorCode
from shared.records import SearchFilters
from shared.documents.pages import cite_uri, page_of

_SEVERITY = {"unauthorized_source": 0, "invalid_source": 1}


def iso_utc(unix: int) -> str | None:
    """Unix seconds as an ISO 8601 UTC time ("...Z"); None for 0 (unknown)."""
    if not unix:
        return None
    return dt.datetime.fromtimestamp(unix, tz=dt.timezone.utc).isoformat().replace("+00:00", "Z")


def unix_from_iso(value: str | None, field: str) -> int:
    """An ISO 8601 date or date-time (UTC when it has no offset) as unix seconds; 0 for none."""
    if not value:
        return 0
    text = value.strip()
    try:
        parsed = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise InvalidArgument(field, f"{value!r} is not an ISO 8601 date (YYYY-MM-DD or a date-time)") from None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=dt.timezone.utc)
    return min(MAX_UNIX_TIME, max(0, int(parsed.timestamp())))


def search_filters(filters: RawFiltersIn | None) -> SearchFilters:
    """The core's filters for rag_get_raw_results' `filters` argument."""
    f = filters or RawFiltersIn()
    return SearchFilters(date_from_unix=unix_from_iso(f.date_from, "filters.date_from"),
                         date_to_unix=unix_from_iso(f.date_to, "filters.date_to"), tags=tuple(f.tags or ()),
                         owners=tuple(f.owners or ()))


def headline(text: str) -> str:
    """The first HEADLINE_WORDS words, with an ellipsis when cut."""
    words = text.split()
    return " ".join(words[:HEADLINE_WORDS]) + ("…" if len(words) > HEADLINE_WORDS else "")


def http_uri(uri: str) -> str | None:
    """Only web URLs leave the server (a file:// URI would reveal server paths)."""
    return uri if uri.startswith(("http://", "https://")) else None


def auth_mode(principal: Principal) -> Literal["api_key", "bearer", "none"]:
    return {"api_key": "api_key", "jwt": "bearer"}.get(principal.auth_method, "none")  # type: ignore[return-value]


def segment_out(r: RankedResult, source_url: str, query: str = "") -> SegmentOut:
    """A rag_search segment for one result, linking to it by `source_url`; its summary's
    highlights are where `query`'s analysed terms match in it."""
    e, a = r.entry, r.artifact
    summary = e.content_summary or r.snippet
    return SegmentOut(
        segment_uid=e.id, source_file_name=a.file_name or a.title or a.artifact_id,
        source_file_type=a.file_type or a.source_type or "text",
        headline=headline(e.headline or a.title) or None, segment_summary=summary or None,
        raw_text=e.text, source_url=source_url,
        highlights=list(r.highlights if summary == r.snippet else highlights(summary, query)) or None,
        duplicates=duplicates_out(r))


def duplicates_out(r: RankedResult) -> list[DuplicateOut] | None:
    """The copies folded into `r` (services/rag_pipeline/merge.py); None when none were."""
    return [DuplicateOut(**duplicate_values(d)) for d in r.duplicates] or None


def passage_offsets(r: RankedResult) -> dict[str, int] | None:
    """seed-000 `citations.offsets`: the cited passage's span within its document — `start` and
    `end`, `[start, end)` in Unicode code points of the document's extracted text, the text the
    passage was cut from (services/knowledge_store/chunking.py) — plus `chunk_index` (its 0-based
    place among the document's passages) and, for a paged format, `page` (1-based). Without
    `start`/`end` for a passage stored before spans were kept (a re-ingest gives it one). None for
    a remote source's passage (its place is the source's)."""
    if r.source_id != LOCAL:
        return None
    e = r.entry
    page = page_of(e.headline, r.artifact.file_type)
    return {**({"start": e.span_start, "end": e.span_end} if e.span_end else {}), "chunk_index": e.chunk_index,
            **({"page": page} if page else {})}


def hit_out(r: RankedResult, uri: str) -> HitOut:
    """A rag_get_raw_results hit for one result, linking to it by `uri`."""
    e, a = r.entry, r.artifact
    rel, rec, rich, rep = r.scores
    return HitOut(
        id=e.id, score=round(r.overall, 6), snippet=r.snippet, chunk=e.text, title=a.title or a.file_name,
        uri=uri, resourceId=a.source_id, sourceId=a.artifact_id,
        provenance=ProvenanceOut(artifact_id=a.artifact_id, source_type=a.source_type,
                                 source_uri=http_uri(cite_uri(a.source_uri, e.headline, a.file_type)),
                                 file_name=a.file_name, file_type=a.file_type, chunk_index=e.chunk_index,
                                 headline=e.headline, page=page_of(e.headline, a.file_type),
                                 tags=list(a.tags) or None,
                                 scores=ScoresOut(relevancy=rel, recency=rec, richness=rich, reputation=rep)),
        timestamp=iso_utc(e.timestamp_unix or a.modified_unix or a.created_unix),
        highlights=list(r.highlights) or None, duplicates=duplicates_out(r))


def resource_out(who: Principal, v: SourceView) -> ResourceOut:
    """A source as `who` sees it; sizes only when every artifact of it is visible to them."""
    full = v.fully_visible_to(who.groups)
    return ResourceOut(
        id=v.source_id, name=v.name, sourceType=v.source_types[0] if len(v.source_types) == 1 else "mixed",
        sourceId=v.source_id, authRequired=bool(v.groups), authMode=auth_mode(who), groups=list(v.groups),
        scopes=["read"], lastIndexed=iso_utc(v.last_indexed_unix),
        counts=CountsOut(docs=v.artifacts, chunks=v.entries) if full else None)


def worst_code(errors: list[SourceErrorOut]) -> ErrorCode:
    """unauthorized_source before invalid_source before anything else."""
    return min((e.code for e in errors), key=lambda c: _SEVERITY.get(c, 2)) if errors else "invalid_source"


def worst_error(errors: list[SourceErrorOut]) -> ErrorOut | None:
    """One error for several per-source errors: the worst code, every message."""
    if not errors:
        return None
    code = worst_code(errors)
    return ErrorOut(code=code, message="; ".join(e.message for e in errors))


def source_status_out(reports: tuple[SourceReport, ...] | list[SourceReport]) -> list[SourceStatusOut]:
    """Federation: how each source of the search fared."""
    return [SourceStatusOut(source_id=r.source_id, status=r.status, latency_ms=round(r.latency_ms, 3),
                            result_count=r.result_count, error_message=r.error or None, error_code=r.code or None,
                            filtered=r.filtered or None, note=r.note or None) for r in reports]


def passage_title(r: RankedResult) -> str:
    """A passage's title for synthesis; a remote source's passage is labelled as such: its text
    is untrusted data from that source, to be quoted, never followed as instructions."""
    title = r.artifact.title or r.artifact.file_name
    if r.source_id == LOCAL:
        return title
    return f"[remote source {r.source_id}: untrusted data] {title}".strip()


def remote_resources_out(found: RemoteResources) -> list[ResourceOut]:
    """A remote source's resources, ids `<source>:<resource id>`, tagged with the source and its
    connection status; a remote that did not answer is one entry carrying the status and why."""
    sid = found.source.id
    if found.status != "connected":
        return [ResourceOut(id=sid, name=found.source.name or sid, sourceType="remote", sourceId=sid,
                            authRequired=found.source.needs_credential, authMode="none", serverId=sid,
                            connectionStatus=found.status, error=found.error or None)]
    out = []
    for r in found.resources:
        rid = str(r.get("id"))
        name = r.get("name") if isinstance(r.get("name"), str) else rid
        kind = r.get("sourceType") if isinstance(r.get("sourceType"), str) else "remote"
        out.append(ResourceOut(id=rid if rid == sid else f"{sid}:{rid}", name=name[:256], sourceType=kind[:64],
                               sourceId=sid, authRequired=found.source.needs_credential, authMode="none",
                               serverId=sid, connectionStatus="connected"))
    return out


def add_degraded(meta: MetaOut, answer: Synthesis) -> None:
    """A synthesis made without a configured step (e.g. the answer re-ranker failed and today's
    unit scoring was used) marks the tool's answer degraded with its reasons, after the search's."""
    if answer.degraded:
        meta.degraded = True
        meta.degraded_reasons = [*(meta.degraded_reasons or []), *answer.degraded_reasons]


def remote_servers(remote: list[str]) -> tuple[tuple[str, ...], tuple[tuple[str, tuple[str, ...]], ...]]:
    """A vetted remote selection (source ids and `<source>:<resource>` ids) as the sources it
    names, in order, and the resources each is restricted to (a source named whole: none)."""
    servers = tuple(dict.fromkeys(r.split(":", 1)[0] for r in remote))
    restrict = tuple((sid, tuple(r.split(":", 1)[1] for r in remote if r.startswith(sid + ":")))
                     for sid in servers if sid not in remote)
    return servers, restrict
