"""Persona agents' settings: the record and its checks, the same for every backend.

A persona is identified by the `persona_id` its ranking profiles already carry; this adds what
an agent acting as it needs: a system prompt, the tools it may call (or none), the sources it
consults and the LLM model it uses. Each backend stores it as one JSON value (`to_json`) per
persona, tenant-scoped like everything else the store holds: the embedded backend in the
tenant's `meta` table (embedded/personas.py), the qdrant backend as a point (qdrant/store.py).
"""
from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass, replace

from services.knowledge_store import validation
from shared.errors import InvalidArgument

MAX_PROMPT_CHARS = 8_000
MAX_NAME_CHARS = 200
MAX_LIST = 32
_TOOL = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")
_SOURCE_CHARS = 256


@dataclass(frozen=True, slots=True)
class Persona:
    tenant_id: str
    persona_id: str
    display_name: str = ""
    system_prompt: str = ""
    allowed_tools: tuple[str, ...] = ()      # empty = the agent's default set
    allowed_sources: tuple[str, ...] = ()    # empty = every visible source
    llm_model: str = ""                      # "" = the configured chat model
    updated_unix: int = 0
    tools_disabled: bool = False

    def to_json(self) -> str:
        data = asdict(self)
        data.pop("tenant_id")
        return json.dumps(data, sort_keys=True)

    @classmethod
    def from_json(cls, tenant_id: str, text: str) -> Persona:
        data = json.loads(text)
        return cls(tenant_id=tenant_id, persona_id=data["persona_id"], display_name=data.get("display_name", ""),
                   system_prompt=data.get("system_prompt", ""),
                   allowed_tools=tuple(data.get("allowed_tools", ())),
                   allowed_sources=tuple(data.get("allowed_sources", ())), llm_model=data.get("llm_model", ""),
                   updated_unix=int(data.get("updated_unix", 0)), tools_disabled=bool(data.get("tools_disabled")))


def check(p: Persona) -> Persona:
    """`p` validated (InvalidArgument names the field), lists de-duplicated."""
    validation.tenant_id(p.tenant_id)
    if not p.persona_id:
        raise InvalidArgument("persona_id", "is required")
    validation.persona_id(p.persona_id)
    if len(p.display_name) > MAX_NAME_CHARS:
        raise InvalidArgument("display_name", f"has {len(p.display_name)} characters, at most {MAX_NAME_CHARS}")
    if len(p.system_prompt) > MAX_PROMPT_CHARS:
        raise InvalidArgument("system_prompt", f"has {len(p.system_prompt)} characters, at most {MAX_PROMPT_CHARS}")
    for name, values in (("allowed_tools", p.allowed_tools), ("allowed_sources", p.allowed_sources)):
        if len(values) > MAX_LIST:
            raise InvalidArgument(name, f"{len(values)} entries, at most {MAX_LIST}")
    for i, tool in enumerate(p.allowed_tools):
        if not _TOOL.match(tool):
            raise InvalidArgument(f"allowed_tools[{i}]", f"{tool!r} is not a tool name (letters, digits, _ . -)")
    for i, source in enumerate(p.allowed_sources):
        if not source.strip() or len(source) > _SOURCE_CHARS:
            raise InvalidArgument(f"allowed_sources[{i}]", f"must be a source id of 1-{_SOURCE_CHARS} characters")
    if len(p.llm_model) > MAX_NAME_CHARS or any(c.isspace() for c in p.llm_model):
        raise InvalidArgument("llm_model", "must be a model name without spaces, at most 200 characters")
    return replace(p, allowed_tools=tuple(dict.fromkeys(p.allowed_tools)),
                   allowed_sources=tuple(dict.fromkeys(p.allowed_sources)))


__all__ = ["Persona", "check"]
