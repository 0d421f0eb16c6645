"""A file that cannot be ingested: `Rejected(path, reason, problem)`, `reason` one of

    EMPTY  UNREADABLE  ENCRYPTED  UNSUPPORTED  CONVERSION_FAILED  BAD_FRONT_MATTER  DUPLICATE_ID
    OVER_LIMIT (a hostile or oversized file held to its `Limits`, bounded.py and worker.py)
"""
from __future__ import annotations

from shared.errors import InvalidArgument

EMPTY, UNREADABLE, ENCRYPTED, UNSUPPORTED, CONVERSION_FAILED, BAD_FRONT_MATTER, DUPLICATE_ID, OVER_LIMIT = (
    "empty", "unreadable", "encrypted", "unsupported type", "conversion failed", "bad front matter",
    "duplicate id", "over a limit")


class Rejected(InvalidArgument):
    """A file that cannot be ingested; `reason` is one of the names above."""

    def __init__(self, path: str, reason: str, problem: str) -> None:
        super().__init__(path, problem)
        self.reason = reason


__all__ = ["BAD_FRONT_MATTER", "CONVERSION_FAILED", "DUPLICATE_ID", "EMPTY", "ENCRYPTED", "OVER_LIMIT", "Rejected",
           "UNREADABLE", "UNSUPPORTED"]
