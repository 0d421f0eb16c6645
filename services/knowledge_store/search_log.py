"""The search log and the votes checked against it: the rules both backends keep (the front).

    SearchLogRecord   what one search returned (entry and artifact ids, ranks), to whom (the
                      verified user), when, and the SHA-256 of its query (no text). Written by
                      the RAGPipeline after each answer (`RecordSearch`).
    bounds            a tenant keeps its last MAX_SEARCHES_PER_TENANT searches, none older than
                      SEARCH_RETENTION_S; older ones are pruned as new ones are written, so a
                      vote naming a pruned search is refused like an unknown one.
    check_vote        a vote naming a `search_id` counts only when that search is a recent one
                      of the same tenant (each tenant has its own log) and the same verified
                      user, and the voted item was among its results; otherwise
                      InvalidArgument naming `search_id`. An unknown id, another tenant's and
                      another user's are answered alike (the log is no oracle of others' ids).
    source votes      a vote on a federated result counts on its source: one current vote per
                      user per source and tenant (a second replaces the first), so one user
                      moves a source's reputation by at most one vote.
"""
from __future__ import annotations

import re

from services.knowledge_store import validation
from shared.errors import shown
from shared.errors import InvalidArgument
from shared.records import SearchLogRecord

MAX_SEARCHES_PER_TENANT = 10_000
SEARCH_RETENTION_S = 30 * 86_400
MAX_SEARCH_ITEMS = 200                 # results of one logged search (RAGPipeline's max_top_k_final is 100)
PRUNE_EVERY = 64                       # a write prunes the tenant's log once in this many
SEARCH_ID_RULE = "16-64 characters: letters, digits, '-' and '_' (as SearchAndRank returned it)"
_SEARCH_ID = re.compile(r"^[A-Za-z0-9_-]{16,64}$")
MAX_RESULT_ID_CHARS = validation.MAX_ARTIFACT_ID_CHARS + 16   # an entry id (`<artifact>#<chunk>`), a source result


def search_id(value: str) -> str:
    if not isinstance(value, str) or not _SEARCH_ID.match(value):
        raise InvalidArgument("search_id", f"{shown(value)} is not a search id: {SEARCH_ID_RULE}")
    return value


def record(r: SearchLogRecord) -> SearchLogRecord:
    """A search to log, checked field by field before anything is written."""
    validation.tenant_id(r.tenant_id)
    search_id(r.search_id)
    if r.user_id:
        validation.label(r.user_id, "user_id")
    if not validation.SHA256_HEX.match(r.query_sha256):
        raise InvalidArgument("query_sha256", "must be the 64 hex digits (lower case) of the query's SHA-256")
    if r.created_unix <= 0:
        raise InvalidArgument("created_unix", f"must be a positive unix time, got {r.created_unix}")
    if len(r.items) > MAX_SEARCH_ITEMS:
        raise InvalidArgument("items", f"{len(r.items)} results, at most {MAX_SEARCH_ITEMS} accepted")
    for i, item in enumerate(r.items):
        for name, value in (("entry_id", item.entry_id), ("artifact_id", item.artifact_id)):
            if not value or len(value) > MAX_RESULT_ID_CHARS:
                raise InvalidArgument(f"items[{i}].{name}", f"must be 1 to {MAX_RESULT_ID_CHARS} characters")
        if item.rank < 1:
            raise InvalidArgument(f"items[{i}].rank", f"must be >= 1, got {item.rank}")
    return r


def unknown(sid: str) -> InvalidArgument:
    return InvalidArgument("search_id", f"'{sid}' is not a recent search of yours in this tenant (a search id is "
                                        "good for the user it was returned to, for 30 days)")


def check_vote(found: SearchLogRecord | None, sid: str, user_id: str, target_id: str, now: int) -> None:
    """InvalidArgument naming `search_id` unless `user_id` may vote on `target_id` under `sid`
    (module docstring). A search logged without a user (authentication off: a trusted network)
    takes the votes of any user of its tenant."""
    if found is None or found.created_unix < now - SEARCH_RETENTION_S or (found.user_id and
                                                                          found.user_id != user_id):
        raise unknown(sid)
    if not found.holds(target_id):
        raise InvalidArgument("search_id", f"'{target_id}' was not among the results of search '{sid}' "
                                           f"({len(found.items)} results); vote on a result it returned")


def source_vote(source_id: str, target_id: str, user_id: str) -> None:
    """A vote on a federated result: its source, the result (`<source>:<remote id>`), a user."""
    validation.label(source_id, "source_id")
    if not target_id.startswith(f"{source_id}:") or len(target_id) <= len(source_id) + 1:
        raise InvalidArgument("target_id", f"{shown(target_id)} is not a result of source "
                                           f"'{source_id}' ('{source_id}:<remote id>')")
    if len(target_id) > MAX_RESULT_ID_CHARS:
        raise InvalidArgument("target_id", f"is {len(target_id)} characters, at most {MAX_RESULT_ID_CHARS} accepted")
    if not user_id.strip():
        raise InvalidArgument("user_id", "is required: each user has one vote per source")
    validation.label(user_id, "user_id")


__all__ = ["MAX_SEARCHES_PER_TENANT", "SEARCH_RETENTION_S", "MAX_SEARCH_ITEMS", "PRUNE_EVERY", "check_vote",
           "record", "search_id", "source_vote", "unknown"]
