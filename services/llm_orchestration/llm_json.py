"""Reading the JSON object a chat model was asked for.

Some OpenAI-compatible servers ignore `response_format` and wrap the object in a Markdown
code fence; that much is tolerated. Anything else that is not JSON is the caller's
UpstreamFailed.
"""
from __future__ import annotations

import json
import re
from typing import Any

_FENCE = re.compile(r"^\s*```(?:json|JSON)?\s*\n(.*)\n\s*```\s*$", re.S)


def loads_reply(content: str) -> Any:
    """`json.loads` of the reply, after removing one surrounding ``` fence if present."""
    match = _FENCE.match(content)
    return json.loads(match.group(1) if match else content)
