"""rag_discover_resources across the federation: each remote's resources tagged with its
server, and a connection status saying why one is not connected."""
from __future__ import annotations

import asyncio

from services.rag_pipeline.federation.discover import (
    ACTION_REQUIRED,
    CONNECTED,
    ERROR,
    LOCKED,
    discover_remotes,
)
from services.rag_pipeline.federation.fanout import Federation
from services.rag_pipeline.federation.hits import Caller
from services.rag_pipeline.federation.remote import RemoteError
from services.rag_pipeline.federation.sources import Source, SourcesConfig
from services.rag_pipeline.tools.convert import remote_resources_out
from shared.identity import Principal

URL = "http://127.0.0.1:9/mcp"
SOURCES = (Source(id="wiki", url=URL, groups=frozenset({"eng"})),
           Source(id="nokey", url=URL, groups=frozenset({"eng"}), credential_env="NUCLEUS_TEST_UNSET_CREDENTIAL"),
           Source(id="refuses", url=URL, groups=frozenset({"eng"})),
           Source(id="forbids", url=URL, groups=frozenset({"eng"})),
           Source(id="slow", url=URL, groups=frozenset({"eng"}), timeout_s=0.1),
           Source(id="hr", url=URL, groups=frozenset({"hr"})))
ENG = Principal(tenant_id="acme", user_id="ann", groups=("eng",))


class Remotes:
    """Remote answers by source id (what the MCP clients would return or raise)."""

    async def __call__(self, source, query, deadline_s):
        return []

    async def discover(self, source, username, deadline_s):
        if source.id == "refuses":
            raise RemoteError(source.id, "credential", "the source answered HTTP 401 to our credential")
        if source.id == "forbids":
            raise RemoteError(source.id, "credential", "the source refused our credential (HTTP 403 Forbidden)")
        if source.id == "slow":
            await asyncio.sleep(30)
        return [{"id": "handbook", "name": "Handbook", "sourceType": "docs"}, {"id": "faq", "name": "FAQ"}]


async def test_every_visible_remote_is_listed_with_its_status_and_resources():
    found = await discover_remotes(Federation(lambda: SourcesConfig(SOURCES, default_tenants=frozenset({"acme"})),
                                              Remotes()), ENG, Caller.of(ENG))
    status = {f.source.id: f.status for f in found}
    assert status == {"wiki": CONNECTED, "nokey": ACTION_REQUIRED, "refuses": ACTION_REQUIRED, "forbids": LOCKED,
                      "slow": ERROR}                                    # hr: not the caller's group
    wiki = remote_resources_out([f for f in found if f.source.id == "wiki"][0])
    assert [(r.id, r.serverId, r.connectionStatus, r.sourceType) for r in wiki] == [
        ("wiki:handbook", "wiki", "connected", "docs"), ("wiki:faq", "wiki", "connected", "remote")]
    [slow] = remote_resources_out([f for f in found if f.source.id == "slow"][0])
    assert (slow.id, slow.connectionStatus) == ("slow", "error") and slow.error
    [nokey] = remote_resources_out([f for f in found if f.source.id == "nokey"][0])
    assert nokey.authRequired and "credential" in nokey.error
