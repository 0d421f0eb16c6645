"""What the console's admin pages show, from the RAGPipeline core and the federation runtime (no HTTP).

    profile_history(pipeline, tenant, persona, name)   every stored version (newest first, at most
                                                       HISTORY_VERSIONS) with its diff to the one before
    store_profile(pipeline, principal, tenant, form)   the editor's save: (stored, values, errors by field)

The tenant is always the session's (`ConsoleApp.tenant`): an admin's own, or the one an operator
credential naming none picked.
"""
from __future__ import annotations

import asyncio
from typing import Any, Mapping

from ranking.profile import RankingProfile
from services.rag_pipeline.console.profile_form import diff, field_of, form_values, parse_profile
from services.rag_pipeline.core import RagPipeline
from shared.errors import InvalidArgument, NotFound
from shared.identity import Principal

HISTORY_VERSIONS = 50


async def profile_history(pipeline: RagPipeline, tenant: str, persona: str, name: str) -> dict[str, Any]:
    """The newest `HISTORY_VERSIONS` versions of one profile, each with the fields it changed."""
    latest = await pipeline.get_profile(tenant, persona, name)
    if latest.persona_id != persona:
        raise NotFound(f"ranking profile '{name}' of persona '{persona}' does not exist for tenant '{tenant}'")
    first = max(1, latest.version - HISTORY_VERSIONS)          # one more than shown: the oldest shown's diff

    async def version(v: int) -> RankingProfile | None:
        try:
            return await pipeline.get_profile(tenant, persona, name, v)
        except NotFound:
            return None

    found = await asyncio.gather(*(version(v) for v in range(first, latest.version)))
    versions = [p for p in found if p is not None] + [latest]
    shown = range(len(versions) - 1, 0 if first > 1 else -1, -1)      # the oldest read only for its successor's diff
    rows = [{"profile": versions[i], "changes": diff(versions[i - 1] if i else None, versions[i]), "first": i == 0}
            for i in shown]
    return {"latest": latest, "versions": rows}


async def store_profile(pipeline: RagPipeline, principal: Principal, tenant: str, form: Mapping[str, Any]
                        ) -> tuple[RankingProfile | None, dict[str, Any], dict[str, str]]:
    """Parse every field, then let the core (and the store's put_ranking_profile validation) store
    the next version; a refusal that names a field is shown on that field."""
    profile, errors = parse_profile(tenant, form)
    values = {k: form.get(k, "") for k in form_values(None)}
    if profile is None:
        return None, values, errors
    try:
        stored = await pipeline.put_profile(profile, principal)
    except InvalidArgument as err:
        named = field_of(err)
        problem = str(err).partition(": ")[2] if named else ""
        return None, values, {named: problem or str(err)} if named else {"_form": str(err)}
    return stored, form_values(stored), {}


__all__ = ["profile_history", "store_profile", "HISTORY_VERSIONS"]
