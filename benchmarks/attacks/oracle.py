"""Who may see which artifact: the attack suite's own model of the access policy, written from
the documented rules (docs/MCP.md "Who sees what"), never from the product's code, so that a
result the product returns can be judged independently.

An artifact is visible to a caller when all hold:

    tenant     the artifact is in the caller's tenant
    groups     the artifact has no visibility groups, or shares one with the caller
    sources    the artifact's source has no rule, or the rule's groups share one with the caller
    session    the caller has no restricting session tags (tags starting with one of the tenant's
               `session_tag_prefixes`), or the artifact carries at least one of them

`Oracle.leaks(viewer, artifact_ids, text)` names what in an answer the viewer may not see: an
artifact that is not visible, an artifact the model does not know (something injected), or a
canary string of an artifact that is not visible.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable, Mapping


@dataclass(frozen=True)
class Artifact:
    artifact_id: str
    tenant: str
    source_id: str
    groups: frozenset[str] = frozenset()
    tags: frozenset[str] = frozenset()


@dataclass(frozen=True)
class Viewer:
    """Who a call runs as: tenant, groups and session tags, as the credentials say."""

    label: str
    tenant: str
    groups: frozenset[str] = frozenset()
    session_tags: tuple[str, ...] = ()


@dataclass
class TenantRules:
    session_tag_prefixes: tuple[str, ...] = ()
    source_groups: Mapping[str, frozenset[str]] = field(default_factory=dict)

    @classmethod
    def from_config(cls, rules: Mapping) -> TenantRules:
        sources = {sid: frozenset(r.get("groups", ())) for sid, r in (rules.get("sources") or {}).items()}
        return cls(tuple(rules.get("session_tag_prefixes", ())), sources)


class Oracle:
    def __init__(self, artifacts: Iterable[Artifact], rules: Mapping[str, TenantRules] | None = None,
                 canaries: Mapping[str, str] | None = None) -> None:
        self.artifacts = {(a.tenant, a.artifact_id): a for a in artifacts}
        self.rules = dict(rules or {})
        self.canaries = dict(canaries or {})        # canary string -> (tenant-qualified) artifact id "t/a"

    def restricting_tags(self, viewer: Viewer) -> frozenset[str]:
        prefixes = self.rules.get(viewer.tenant, TenantRules()).session_tag_prefixes
        return frozenset(t for t in viewer.session_tags if any(t.startswith(p) for p in prefixes))

    def visible(self, viewer: Viewer, artifact: Artifact) -> bool:
        if artifact.tenant != viewer.tenant:
            return False
        if artifact.groups and not artifact.groups & viewer.groups:
            return False
        rule = self.rules.get(artifact.tenant, TenantRules()).source_groups.get(artifact.source_id)
        if rule and not rule & viewer.groups:
            return False
        restricting = self.restricting_tags(viewer)
        return not restricting or bool(restricting & artifact.tags)

    def visible_ids(self, viewer: Viewer) -> set[str]:
        return {a.artifact_id for a in self.artifacts.values() if self.visible(viewer, a)}

    def leaks(self, viewer: Viewer, artifact_ids: Iterable[str], text: str = "") -> list[str]:
        """What of an answer (its artifact ids, its whole text) `viewer` may not see."""
        found = []
        for aid in dict.fromkeys(artifact_ids):
            artifact = self.artifacts.get((viewer.tenant, aid))
            if artifact is None:
                found.append(f"{aid} (unknown or of another tenant)")
            elif not self.visible(viewer, artifact):
                found.append(aid)
        for canary, owner in self.canaries.items():
            tenant, _, aid = owner.partition("/")
            artifact = self.artifacts.get((tenant, aid))
            if canary in text and (artifact is None or not self.visible(viewer, artifact)):
                found.append(f"canary {canary}")
        return found


def artifact_of(uid: str) -> str:
    """The artifact id of an entry id (`<artifact_id>#<chunk>`) or of an artifact id."""
    return uid.rsplit("#", 1)[0] if "#" in uid else uid


__all__ = ["Artifact", "Oracle", "TenantRules", "Viewer", "artifact_of"]
