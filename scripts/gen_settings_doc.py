"""docs/SETTINGS.md from the settings objects (shared/settings.py): one row per environment
variable, its default, what it does (the field's attribute docstring) and who reads it.

    python scripts/gen_settings_doc.py           # write docs/SETTINGS.md
    python scripts/gen_settings_doc.py --check   # exit 1 if docs/SETTINGS.md is stale
"""
from __future__ import annotations

import sys
from dataclasses import fields
from pathlib import Path

from pydantic import SecretStr
from pydantic_core import PydanticUndefined

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from shared.documents.limits import INGEST_PREFIX, Limits  # noqa: E402
from shared.settings import SETTINGS_CLASSES, env_names  # noqa: E402

OUT = ROOT / "docs" / "SETTINGS.md"
#: Who reads each settings object.
READERS = {"KnowledgeStoreSettings": "KnowledgeStore", "LlmOrchestrationSettings": "LlmOrchestration",
           "RagPipelineSettings": "RAGPipeline", "TelemetrySettings": "every service",
           "StackSettings": "RAGPipeline, CLI", "CliSettings": "CLI / supervisor"}
HEADER = """# Settings

Every `NUCLEUS_*` environment variable, generated from the settings objects in
`shared/settings.py` by `python scripts/gen_settings_doc.py` (do not edit by hand; a unit test
fails when this file is stale). Both deployment modes read the same variables: in one process
(`--mode single`) each service still reads its own prefix. A `NUCLEUS_*` variable that nothing
reads is logged as a warning when a service or the CLI starts. The standard `OTEL_*` variables
are OpenTelemetry's own.
"""


def _default(field) -> str:
    if field.default_factory is not None:
        return "(derived)"
    value = field.default
    if value is PydanticUndefined or value is None:
        return "unset"
    if isinstance(value, SecretStr):
        return "unset" if not value.get_secret_value() else "(secret)"
    if value == "":
        return '""'
    return f"`{value}`"


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def rows() -> list[tuple[str, str, str, str]]:
    """(variable, default, what it does, read by), one per variable, in the objects' order."""
    out: dict[str, list[str]] = {}
    for cls in SETTINGS_CLASSES:
        for name, field in cls.model_fields.items():
            for variable in env_names(cls, name):
                if variable in out:
                    if READERS[cls.__name__] not in out[variable][3]:
                        out[variable][3] += f", {READERS[cls.__name__]}"
                    continue
                out[variable] = [variable, _default(field), _cell(field.description or "—"), READERS[cls.__name__]]
    for f in fields(Limits):
        out[f"{INGEST_PREFIX}{f.name.upper()}"] = [f"{INGEST_PREFIX}{f.name.upper()}", f"`{f.default}`",
                                                    "A conversion limit (docs/INGEST.md, shared/documents/limits.py).",
                                                    "ingest (CLI, conversion worker)"]
    return [tuple(r) for r in out.values()]  # type: ignore[misc]


def render() -> str:
    lines = [HEADER, "| Variable | Default | What it does | Read by |", "| --- | --- | --- | --- |"]
    lines += [f"| `{v}` | {d} | {w} | {r} |" for v, d, w, r in rows()]
    return "\n".join(lines) + "\n"


def main() -> int:
    text = render()
    if "--check" in sys.argv[1:]:
        if not OUT.exists() or OUT.read_text(encoding="utf-8") != text:
            print("docs/SETTINGS.md is stale; run: python scripts/gen_settings_doc.py", file=sys.stderr)
            return 1
        print(f"docs/SETTINGS.md up to date ({len(rows())} settings)")
        return 0
    OUT.write_text(text, encoding="utf-8")
    print(f"wrote {OUT.relative_to(ROOT)} ({len(rows())} settings)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
