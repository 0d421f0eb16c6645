"""What the caller of a KnowledgeStore call may do: the store's own check of tenant and groups,
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

from collections.abc import Callable, Sequence
from dataclasses import replace

from services.knowledge_store.models import StoreStatus
from shared.errors import PermissionDenied
from shared.identity import ADMIN, OPERATOR, Principal, relays_operator
from shared.records import Hit, SearchFilters, SearchLogRecord


def _is_user(p: Principal) -> bool:
    return p.auth_method == "on_behalf_of"


def tenant(p: Principal | None, requested: str) -> str:
    """The tenant the call acts on: the caller's own when its credential names one."""
    if p is None or not p.tenant_id:
        return requested
    if requested and requested != p.tenant_id:
        raise PermissionDenied(f"tenant_id '{requested}' is not the caller's tenant")
    return p.tenant_id


def read_scope(p: Principal | None, requested: str, filters: SearchFilters) -> tuple[str, SearchFilters]:
    """Tenant and filters of a search or entry read: a user sees only their groups' artifacts."""
    if p is None or p.has_role(OPERATOR):
        return tenant(p, requested), filters
    groups = p.groups if _is_user(p) else ()       # a service for no user: public artifacts only
    return tenant(p, requested), replace(filters, visibility_groups=groups, enforce_visibility=True)


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
    return tenant(p, requested)


def write(p: Principal | None, requested: str, what: str) -> str:
    """Tenant-wide changes: operators, or a user with the admin role (in their tenant)."""
    if p is None or p.has_role(OPERATOR) or (_is_user(p) and p.has_role(ADMIN)):
        return tenant(p, requested)
    raise PermissionDenied(f"{what} needs the '{ADMIN}' role or an operator credential")


def profile_write(p: Principal | None, requested: str, is_default: bool, name: str) -> str:
    """A tenant's or persona's default profile ranks everyone's searches: admins only. Other
    named profiles are the user's own tuning: any user of the tenant."""
    if is_default or name in ("", "default"):
        return write(p, requested, "changing a default ranking profile")
    if p is not None and not p.has_role(OPERATOR) and not _is_user(p):
        raise PermissionDenied(f"{p.user_id} may write ranking profiles only on behalf of a user")
    return tenant(p, requested)


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


__all__ = ["feedback_user", "search_record", "metadata_read", "profile_write", "read_scope", "read_tenant",
           "status_view", "store_status", "tenant",
           "visible", "write"]
