"""MCP tool input models several services share."""
from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, Field

from shared.errors import MAX_UNIX_TIME
from shared.records import SearchFilters

UnixTime = Annotated[int, Field(ge=0, le=MAX_UNIX_TIME, description="unix seconds; 0 = open")]


class FiltersIn(BaseModel):
    """Metadata filters of a search (seed 001 KnowledgeSearchFilters), as a tool argument."""

    date_from_unix: UnixTime = 0
    date_to_unix: UnixTime = 0
    source_types: list[str] = Field(default_factory=list)
    tags: list[str] = Field(default_factory=list)
    owners: list[str] = Field(default_factory=list)
    artifact_ids: list[str] = Field(default_factory=list)
    source_ids: list[str] = Field(default_factory=list)

    def to_filters(self, *, persona_id: str = "", groups: tuple[str, ...] | None = None) -> SearchFilters:
        """The core filters; `groups` (the caller's) turns visibility enforcement on."""
        return SearchFilters(
            date_from_unix=self.date_from_unix, date_to_unix=self.date_to_unix,
            source_types=tuple(self.source_types), tags=tuple(self.tags), owners=tuple(self.owners),
            artifact_ids=tuple(self.artifact_ids), source_ids=tuple(self.source_ids), persona_id=persona_id,
            visibility_groups=groups or (), enforce_visibility=groups is not None)
