"""Input checks shared by the core's operations. Each failure names the field."""
from __future__ import annotations

from collections.abc import Sequence

from shared.errors import InvalidArgument

EMBEDDING_PURPOSES = ("query", "document")


def check_text(field: str, text: object, *, max_chars: int) -> str:
    """One non-empty, valid-UTF-8 string of at most `max_chars` characters."""
    if not isinstance(text, str):
        raise InvalidArgument(field, f"expected a string, got {type(text).__name__}")
    if not text.strip():
        raise InvalidArgument(field, "empty text")
    if len(text) > max_chars:
        raise InvalidArgument(field, f"{len(text)} characters; at most {max_chars} are accepted")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:   # lone surrogates smuggled in through a str
        raise InvalidArgument(field, "not valid UTF-8") from None
    return text


def check_texts(texts: Sequence[str], *, max_count: int, max_chars: int,
                field: str = "texts") -> list[str]:
    """A non-empty batch of at most `max_count` texts, each passing `check_text`."""
    if isinstance(texts, (str, bytes)):
        raise InvalidArgument(field, "expected a list of strings, got a single string")
    texts = list(texts)
    if not texts:
        raise InvalidArgument(field, "at least one text is required")
    if len(texts) > max_count:
        raise InvalidArgument(field, f"{len(texts)} texts; at most {max_count} per request")
    for i, text in enumerate(texts):
        check_text(f"{field}[{i}]", text, max_chars=max_chars)
    return texts


def check_purpose(purpose: str) -> str:
    """"query" (the default, also for "") or "document"."""
    purpose = purpose or "query"
    if purpose not in EMBEDDING_PURPOSES:
        raise InvalidArgument("purpose", f"{purpose!r} is not one of {', '.join(EMBEDDING_PURPOSES)}")
    return purpose


def check_ids(field: str, ids: Sequence[str]) -> None:
    """Ids are non-empty and unique (they are how answers refer back to inputs)."""
    seen: set[str] = set()
    for i, item_id in enumerate(ids):
        if not isinstance(item_id, str) or not item_id.strip():
            raise InvalidArgument(f"{field}[{i}].id", "empty id")
        if item_id in seen:
            raise InvalidArgument(f"{field}[{i}].id", f"duplicate id {item_id!r}; ids must be unique")
        seen.add(item_id)
