"""What each MCP tool does to its environment, as MCP tool annotations (hints to clients; every
tool of the three servers carries one of these, docs/MCP.md "Tool annotations").

    @mcp.tool(name="rag_search", description=..., annotations=READ)
"""
from __future__ import annotations

from mcp_types import ToolAnnotations

#: Reads only: no change anywhere; asking again changes nothing.
READ = ToolAnnotations(read_only_hint=True, destructive_hint=False, idempotent_hint=True)
#: Adds something new each call (a profile version, a chat turn spending the caller's budget).
ADD = ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=False)
#: Replaces what is there (a re-ingest, a vote replacing the caller's earlier one, a source edited
#: or enabled/disabled); the same call again leaves the same state.
OVERWRITE = ToolAnnotations(read_only_hint=False, destructive_hint=True, idempotent_hint=True)
#: Deletes; deleting again changes nothing more (the same hints as OVERWRITE).
DELETE = OVERWRITE
#: Changes no data but makes the service act (re-read its configuration now).
REFRESH = ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=True)
#: A remote source's tool proxied as it is: what it does is the remote's (it may reach anything).
PROXIED = ToolAnnotations(read_only_hint=False, destructive_hint=True, idempotent_hint=False, open_world_hint=True)
