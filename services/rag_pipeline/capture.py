"""What one search ranked, handed to a why-not (why_not.py) or a held first page (pages.py) by the search itself.

    captured = Captured()
    token = CAPTURE.set(captured)       # RagPipeline._search calls captured.took(...) once it ranked
    ...
    CAPTURE.reset(token)

A module of its own so that core.py depends on it and on nothing of the why-not.
"""
from __future__ import annotations

from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

from services.rag_pipeline.models import RankedResult, SearchRequest


@dataclass(slots=True)
class Captured:
    """What one search ranked, handed over by `RagPipeline._search` while `CAPTURE` is set."""
    request: SearchRequest | None = None        # validated
    legs: Any = None                            # core._Legs: phrases, vectors, each leg's columns
    merged: list = field(default_factory=list)  # merge.Merged per candidate
    candidates: Any = None                      # ranking.Candidates of `merged`
    config: Any = None                          # ranking.RankingConfig
    results: tuple[RankedResult, ...] = ()
    learned: Any = None                         # the profile's learned model ranked it (None: the 4R blend)
    folded: bool = False                        # duplicates were folded (merge.py)
    now_unix: float = 0.0                       # the time its explanations measured ages from

    def took(self, request: SearchRequest, legs: Any, merged: list, candidates: Any, config: Any,
             results: tuple[RankedResult, ...], learned: Any = None, folded: bool = False,
             now_unix: float = 0.0) -> None:
        self.request, self.legs, self.merged, self.candidates, self.config = request, legs, merged, candidates, config
        self.results, self.learned, self.folded, self.now_unix = results, learned, folded, now_unix


CAPTURE: ContextVar[Captured | None] = ContextVar("nucleus_why_not_capture", default=None)
