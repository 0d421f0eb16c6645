"""The check both services' call tables share: every public call of a front is in its table
(`CALLS`) and says whether it is idempotent (no default)."""
from __future__ import annotations

import dataclasses
import inspect

from shared.inprocess import Call


def public_calls(front_class: type) -> set[str]:
    """The front's public calls: its coroutine and async-generator methods."""
    return {name for name, fn in inspect.getmembers(front_class)
            if (inspect.iscoroutinefunction(fn) or inspect.isasyncgenfunction(fn)) and not name.startswith("_")}


def assert_every_call_is_in_the_table_and_marked(front_class: type, calls: dict[str, Call]) -> None:
    assert public_calls(front_class) == set(calls), \
        f"a call of {front_class.__name__} missing from CALLS, or a stale row"
    idempotent = next(f for f in dataclasses.fields(Call) if f.name == "idempotent")
    assert idempotent.default is dataclasses.MISSING, "a row must say whether its call is idempotent"
    assert all(isinstance(c.idempotent, bool) for c in calls.values())
