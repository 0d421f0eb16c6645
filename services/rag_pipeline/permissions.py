"""Who may change what, beyond seeing it: the rules the pipeline core applies to its writes.

    default ranking profile   a change of the tenant's default profile, or of a persona's, needs
                              the `admin` role (`shared.identity.ADMIN`): storing a profile
                              flagged `is_default`, one named "default" (the fallback default),
                              or a new version of the profile that is the scope's default now.
                              Other named profiles stay writable by every user of the tenant.
    feedback                  only on a document the caller can see now (tenant, visibility
                              groups, source rules, session tags: `AccessPolicy.entry_denial`);
                              a hidden document is answered exactly as a missing one
                              (`no_such_target`), so a vote is no existence oracle. One vote per
                              user per document is kept by the KnowledgeStore.

Operators (the stack's own credential, role "operator") are trusted with both.
"""
from __future__ import annotations

from ranking.profile import RankingProfile
from services.rag_pipeline.access import AccessPolicy
from services.rag_pipeline.ports import KnowledgeSource
from shared.errors import InvalidArgument, NotFound, PermissionDenied
from shared.identity import ADMIN, OPERATOR, Principal
from shared.records import Hit, RetrievalRequest, SearchFilters

DEFAULT_PROFILE_NAME = "default"        # the profile a scope falls back to when none is flagged


def trusted(principal: Principal | None) -> bool:
    """No verified caller (authentication off) or an operator: no per-user rule applies."""
    return principal is None or principal.has_role(OPERATOR)


async def check_profile_write(knowledge: KnowledgeSource, profile: RankingProfile, principal: Principal) -> None:
    """PermissionDenied when storing `profile` would change a default without the admin role."""
    if trusted(principal) or principal.has_role(ADMIN):
        return
    scope = f"persona '{profile.persona_id}'" if profile.persona_id else f"tenant '{profile.tenant_id}'"
    why = ""
    if profile.is_default:
        why = f"making '{profile.name}' the default ranking profile of {scope}"
    elif profile.name == DEFAULT_PROFILE_NAME:
        why = f"storing the profile named '{DEFAULT_PROFILE_NAME}' (the fallback default of {scope})"
    else:
        try:
            current = await knowledge.get_profile(profile.tenant_id, profile.persona_id, "")
        except NotFound:
            current = None
        if current is not None and (current.persona_id, current.name) == (profile.persona_id, profile.name):
            why = f"changing '{profile.name}', the default ranking profile of {scope}"
    if why:
        raise PermissionDenied(f"{why} needs the '{ADMIN}' role, which user '{principal.user_id}' does not "
                               "have; profiles that are not the default need no role")


def no_such_target(target: str, target_id: str, tenant_id: str) -> NotFound:
    """The one answer for a feedback target that is missing or hidden from the caller."""
    return NotFound(f"{target} '{target_id}' not found in tenant '{tenant_id}'")


async def check_feedback_target(knowledge: KnowledgeSource, access: AccessPolicy, principal: Principal,
                                tenant_id: str, target: str, target_id: str) -> None:
    """NotFound (`no_such_target`) unless `principal` can see the entry or artifact voted on."""
    if trusted(principal):
        return
    if target == "entry" and "#" not in target_id:
        raise InvalidArgument("target_id", f"{target_id!r} is not an entry id ('<artifact_id>#<chunk_index>')")
    if target == "artifact" and "#" in target_id:
        raise InvalidArgument("target_id", f"{target_id!r} is an entry id; vote on it with target 'entry'")
    hit: Hit | None
    try:
        if target == "entry":
            hits = await knowledge.get_entries(tenant_id, [target_id])
        else:
            hits = (await knowledge.retrieve(RetrievalRequest(
                tenant_id, "", 1, SearchFilters(artifact_ids=(target_id,), visibility_groups=principal.groups,
                                                enforce_visibility=True), keyword=True, hits=True))).keyword_hits
    except InvalidArgument as err:             # the store names its own field (entry_ids[0], ...)
        raise InvalidArgument("target_id", err.message.partition(": ")[2] or err.message) from None
    hit = hits[0] if hits else None
    if hit is None or access.entry_denial(principal, hit):
        raise no_such_target(target, target_id, tenant_id)


__all__ = ["check_profile_write", "check_feedback_target", "no_such_target", "trusted", "DEFAULT_PROFILE_NAME"]
