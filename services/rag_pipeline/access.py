"""Who may see what: the per-source and per-artifact access model of the RAG tools.

    artifact   visible iff its visibility_groups is empty or meets the caller's groups.
               Enforced INSIDE every KnowledgeStore search (`enforce_visibility`).
    source     (a `source_id`, seed 000's "resource") visible iff
                 - its rule in the auth config (`tenants.<t>.sources.<id>.groups`), if any,
                   is empty or meets the caller's groups, AND
                 - the caller can see at least one of its artifacts (it has a public artifact,
                   or the union of its artifacts' groups meets the caller's groups).
               Sources hidden by a rule are excluded from every search by naming them in
               `filters.exclude_source_ids` (from the config, so sources ingested later and
               artifacts without a source id stay searchable).
    session    a trusted platform's session tags that start with a prefix listed in
               `tenants.<t>.session_tag_prefixes` restrict results to artifacts tagged with at
               least one of them (ANY-of), also inside the search (`filters.tags`).

Everything here is a decision over KnowledgeStore data; nothing is cached for longer than
`STATS_TTL_S`, and the per-artifact check is always the store's own, at query time.
"""
from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, replace

from services.rag_pipeline.ports import KnowledgeSource
from shared.auth.config import AuthConfig
from shared.errors import NotFound
from shared.identity import Principal, acting_for
from shared.records import Hit, RetrievalRequest, SearchFilters

STATS_TTL_S = 5.0
MISSING_DOCUMENT = "Document has been deleted or does not exist"


@dataclass(frozen=True, slots=True)
class Unseen:
    """What a caller is told of a document it may not see: exactly what it is told of one that
    does not exist (`message`), so no answer tells the two apart. `reason`, the true one, is for
    the audit trail only."""
    reason: str
    message: str = MISSING_DOCUMENT


def same_as_missing(reason: str) -> Unseen:
    """The one answer for a missing, deleted, forbidden or unverifiable document (the tools that
    say whether, or why not, a caller may see a document all answer through this)."""
    return Unseen(reason=reason)


@dataclass(frozen=True, slots=True)
class SourceView:
    source_id: str
    name: str
    source_types: tuple[str, ...]
    artifacts: int
    entries: int
    last_indexed_unix: int
    content_groups: tuple[str, ...]      # union of the artifacts' visibility groups
    has_public: bool                     # at least one artifact has no visibility groups
    rule_groups: tuple[str, ...] | None  # the auth config's source rule; None = no rule
    tags: tuple[str, ...]

    def rule_allows(self, groups: tuple[str, ...]) -> bool:
        return not self.rule_groups or bool(set(self.rule_groups) & set(groups))

    def visible_to(self, groups: tuple[str, ...]) -> bool:
        content = self.has_public or bool(set(self.content_groups) & set(groups))
        return self.rule_allows(groups) and content

    def fully_visible_to(self, groups: tuple[str, ...]) -> bool:
        """Every artifact is visible (sufficient test: the caller holds every group in use)."""
        return self.rule_allows(groups) and set(self.content_groups) <= set(groups)

    @property
    def groups(self) -> tuple[str, ...]:
        return tuple(sorted(set(self.content_groups) | set(self.rule_groups or ())))


def session_restriction(principal: Principal, config: AuthConfig) -> tuple[str, ...]:
    """The session tags that restrict this principal's results (empty = no restriction)."""
    prefixes = config.rules(principal.tenant_id).session_tag_prefixes
    if not prefixes or not principal.session_tags:
        return ()
    return tuple(t for t in principal.session_tags if any(t.startswith(p) for p in prefixes))


@dataclass(frozen=True, slots=True)
class Scope:
    """The filters a search runs under for one principal; `empty` = nothing is visible."""

    filters: SearchFilters
    post_tags: tuple[str, ...] = ()      # caller's own tag filter, applied after a session restriction
    empty: bool = False

    def keep(self, hit_tags: tuple[str, ...]) -> bool:
        return not self.post_tags or bool(set(self.post_tags) & set(hit_tags))


class AccessPolicy:
    """Which sources and entries a principal may see, decided over a knowledge source."""

    def __init__(self, knowledge: KnowledgeSource, config: AuthConfig, *, ttl_s: float = STATS_TTL_S) -> None:
        self._ks = knowledge
        self.config = config
        self._ttl = ttl_s
        self._cache: dict[str, tuple[float, dict[str, SourceView]]] = {}

    async def sources(self, tenant_id: str) -> dict[str, SourceView]:
        """The tenant's sources by id (empty if nothing was ingested for it)."""
        now = time.monotonic()
        cached = self._cache.get(tenant_id)
        if cached is not None and cached[0] > now:
            return cached[1]
        try:
            stats = await self._ks.stats(tenant_id)
        except NotFound:
            stats = None
        merged: dict[str, dict] = {}
        for s in stats.sources if stats is not None else ():
            m = merged.setdefault(s.source_id, {"types": [], "artifacts": 0, "entries": 0, "last": 0,
                                                "groups": set(), "tags": set()})
            m["types"].append(s.source_type)
            m["artifacts"] += s.artifacts
            m["entries"] += s.entries
            m["last"] = max(m["last"], s.last_indexed_unix)
            m["groups"] |= set(s.visibility_groups)
            m["tags"] |= set(s.tags)
        ids = list(merged)
        public = await asyncio.gather(*(self._has_public(tenant_id, sid) if merged[sid]["groups"] else _true()
                                        for sid in ids))
        rules = self.config.rules(tenant_id).sources
        views = {}
        for sid, has_public in zip(ids, public):
            m = merged[sid]
            rule = rules.get(sid)
            views[sid] = SourceView(
                source_id=sid, name=(rule.name if rule and rule.name else sid),
                source_types=tuple(sorted(set(m["types"]))), artifacts=m["artifacts"], entries=m["entries"],
                last_indexed_unix=m["last"], content_groups=tuple(sorted(m["groups"])), has_public=has_public,
                rule_groups=None if rule is None else tuple(rule.groups), tags=tuple(sorted(m["tags"])))
        self._cache[tenant_id] = (now + self._ttl, views)
        return views

    async def _has_public(self, tenant_id: str, source_id: str) -> bool:
        with acting_for(None):      # a fact about the tenant, not about the user being served
            found = await self._ks.retrieve(RetrievalRequest(
                tenant_id, "", 1, SearchFilters(source_ids=(source_id,), enforce_visibility=True,
                                                visibility_groups=()), keyword=True, hits=True))
        return bool(found.keyword_hits)

    async def scope(self, principal: Principal, *, base: SearchFilters = SearchFilters(),
                    only_sources: tuple[str, ...] | None = None) -> Scope:
        """The filters for a search by `principal`: visibility always enforced, sources hidden by
        a rule excluded, the session restriction applied. `only_sources` must already be vetted."""
        groups = principal.groups
        source_ids = tuple(only_sources) if only_sources is not None else base.source_ids
        # The rules' refused sources are excluded by name (straight from the config, never from
        # a cached list of the tenant's sources: a source ingested since is not hidden, and an
        # artifact without a source id is not either).
        refused = tuple(sorted(sid for sid, rule in self.config.rules(principal.tenant_id).sources.items()
                               if rule.groups and not set(rule.groups) & set(groups)))
        if refused:
            if source_ids:
                source_ids = tuple(s for s in source_ids if s not in refused)
                if not source_ids:
                    return Scope(filters=base, empty=True)
            base = replace(base, exclude_source_ids=tuple(sorted({*base.exclude_source_ids, *refused})))
        restriction = session_restriction(principal, self.config)
        tags, post_tags = base.tags, ()
        if restriction:
            tags, post_tags = restriction, base.tags
        filters = replace(base, source_ids=source_ids, tags=tags, visibility_groups=groups, enforce_visibility=True)
        return Scope(filters=filters, post_tags=post_tags)

    def entry_denial(self, principal: Principal, hit: Hit) -> str:
        """Why `principal` may not open this entry now ("" = allowed)."""
        art = hit.artifact
        if hit.entry.tenant_id and hit.entry.tenant_id != principal.tenant_id:
            return "entry belongs to another tenant"
        if art.visibility_groups and not set(art.visibility_groups) & set(principal.groups):
            return "caller is not in the artifact's visibility groups"
        rule = self.config.rules(principal.tenant_id).sources.get(art.source_id)
        if rule is not None and rule.groups and not set(rule.groups) & set(principal.groups):
            return f"caller is not in the groups of source '{art.source_id}'"
        restriction = session_restriction(principal, self.config)
        if restriction and not set(restriction) & set(art.tags):
            return "session tags do not allow this artifact"
        return ""


async def _true() -> bool:
    return True
