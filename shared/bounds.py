"""The ranges every integer from a caller must lie in before it reaches SQLite or protobuf.

    INT32_MAX       protobuf int32 fields (top_k, version, chunk_index, max_chars, ...)
    INT64_MAX       protobuf int64 and SQLite INTEGER
    MAX_UNIX_TIME   the last second of year 9999: the largest time a date bound may name
    check_int()     InvalidArgument naming the field and the accepted range, never an
                    OverflowError / ValueError from a driver deep inside a call

MCP tool inputs declare the same bounds in their schemas (`Field(ge=..., le=...)`); the cores
check again, because gRPC requests and Python callers do not pass through those schemas.
"""
from __future__ import annotations

from shared.errors import InvalidArgument

INT32_MAX = 2**31 - 1
INT64_MAX = 2**63 - 1
MAX_UNIX_TIME = 253_402_300_799          # 9999-12-31T23:59:59Z


def shown(value: object) -> str:
    """`value` for an error message, short even for a huge integer (no 4300-digit reprs)."""
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) > 10**30:
        return f"an integer of {len(str(abs(value))) if abs(value) < 10**4000 else 'more than 4000'} digits"
    text = repr(value)
    return text if len(text) <= 64 else text[:61] + "..."


def check_int(field: str, value: object, lo: int, hi: int) -> int:
    """`value` if it is an int (not a bool) in lo..hi; InvalidArgument naming `field` otherwise."""
    if not isinstance(value, int) or isinstance(value, bool) or not lo <= value <= hi:
        raise InvalidArgument(field, f"must be an integer in {lo}..{hi}, got {shown(value)}")
    return value


def check_unix_time(field: str, value: object) -> int:
    """A unix time in seconds, 0 (= open / unknown) to MAX_UNIX_TIME."""
    return check_int(field, value, 0, MAX_UNIX_TIME)


__all__ = ["INT32_MAX", "INT64_MAX", "MAX_UNIX_TIME", "check_int", "check_unix_time", "shown"]
