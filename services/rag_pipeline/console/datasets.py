"""Judged datasets the operator lists for the console's Compare page, by name (never a path typed
into a form).

    ConsoleDatasets.load(file)       the operator's file (NUCLEUS_RAG_CONSOLE_DATASETS), checked field by field
    .names_for(tenant)               the names a tenant's users may pick
    .queries(tenant, name)           the dataset's judged queries (InvalidArgument for any other name)

The file is JSON the operator writes:

    {"datasets": [{"name": "scifact", "folder": "beir/scifact", "split": "test", "tenants": ["acme"]}]}

`folder` is a BEIR folder (`queries.jsonl`, `qrels/<split>.tsv`; a relative folder is read from the
file's own directory); `tenants` the tenants whose users see the name (`"*"`: every tenant). The
tenant must already hold the corpus, each document's artifact id its BEIR `_id` (as `nucleus tune`).
A form names a dataset only by a name of that list: anything else — an unknown name, a path, a
name of another tenant's list — is refused naming the field and what is accepted. At most
`MAX_QUERIES` judged queries (those with a relevant document, in the ids' natural order) are used.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from services.rag_pipeline.console.evaluation import MAX_QUERIES, MAX_QUERY_CHARS, JudgedQuery
from shared.errors import InvalidArgument

DATASET_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
SPLIT = re.compile(r"^[A-Za-z0-9_-]{1,32}$")
MAX_LINE_BYTES = 64 * 1024
QRELS_HEADER = ("query-id", "corpus-id", "score")
EVERY_TENANT = "*"


@dataclass(frozen=True, slots=True)
class Dataset:
    name: str
    folder: Path
    split: str
    tenants: tuple[str, ...]

    def for_tenant(self, tenant: str) -> bool:
        return EVERY_TENANT in self.tenants or tenant in self.tenants


@dataclass(frozen=True, slots=True)
class ConsoleDatasets:
    datasets: tuple[Dataset, ...] = ()

    @classmethod
    def load(cls, path: Path) -> ConsoleDatasets:
        """The operator's file, every entry checked (InvalidArgument names the file and the field)."""
        try:
            raw = json.loads(Path(path).read_text(encoding="utf-8"))
        except (OSError, ValueError) as err:
            raise InvalidArgument("NUCLEUS_RAG_CONSOLE_DATASETS", f"cannot read {path} as JSON: {err}") from None
        entries = raw.get("datasets") if isinstance(raw, dict) else None
        if not isinstance(entries, list):
            raise InvalidArgument(f"{path}: datasets", 'must be a list of {"name", "folder", "split", "tenants"}')
        out: list[Dataset] = []
        for i, entry in enumerate(entries):
            dataset = _entry(Path(path).parent, f"{path}: datasets[{i}]", entry)
            if any(d.name == dataset.name for d in out):
                raise InvalidArgument(f"{path}: datasets[{i}].name", f"'{dataset.name}' is listed twice")
            out.append(dataset)
        return cls(tuple(out))

    def names_for(self, tenant: str) -> list[str]:
        return sorted(d.name for d in self.datasets if tenant and d.for_tenant(tenant))

    def named(self, tenant: str, name: str) -> Dataset:
        """The dataset `name` of the tenant's list; InvalidArgument for anything else."""
        accepted = self.names_for(tenant)
        listed = ", ".join(accepted) or "none is listed for this tenant"
        if not DATASET_NAME.match(name or ""):
            raise InvalidArgument("dataset", f"must be the name of a dataset the operator listed ({listed}), "
                                             "never a path")
        found = next((d for d in self.datasets if d.name == name and d.for_tenant(tenant)), None)
        if found is None:
            raise InvalidArgument("dataset", f"'{name}' is not a dataset listed for this tenant ({listed})")
        return found

    def queries(self, tenant: str, name: str) -> tuple[Dataset, list[JudgedQuery], int]:
        """The dataset's judged queries (at most MAX_QUERIES) and how many it judges in all."""
        dataset = self.named(tenant, name)
        judged = _qrels(dataset.folder / "qrels" / f"{dataset.split}.tsv", dataset.name)
        texts = _queries(dataset.folder / "queries.jsonl", dataset.name, set(judged))
        ids = sorted((q for q in judged if q in texts), key=_natural_key)
        chosen = [JudgedQuery(query=texts[q], grades=judged[q]) for q in ids[:MAX_QUERIES]]
        if not chosen:
            raise InvalidArgument("dataset", f"'{name}' holds no judged query with a relevant document")
        return dataset, chosen, len(ids)


def _entry(base: Path, where: str, entry: Any) -> Dataset:
    if not isinstance(entry, dict):
        raise InvalidArgument(where, 'must be an object {"name", "folder", "split", "tenants"}')
    unknown = sorted(set(entry) - {"name", "folder", "split", "tenants"})
    if unknown:
        raise InvalidArgument(f"{where}.{unknown[0]}", "is not a field; accepted: name, folder, split, tenants")
    name = entry.get("name")
    if not isinstance(name, str) or not DATASET_NAME.match(name):
        raise InvalidArgument(f"{where}.name", "must be 1-64 letters, digits, '_', '.', '-' (starting with a "
                                               "letter or digit)")
    folder = entry.get("folder")
    if not isinstance(folder, str) or not folder.strip():
        raise InvalidArgument(f"{where}.folder", "must be a BEIR folder (queries.jsonl, qrels/<split>.tsv)")
    split = entry.get("split", "test")
    if not isinstance(split, str) or not SPLIT.match(split):
        raise InvalidArgument(f"{where}.split", "must be a qrels split name such as test or dev")
    tenants = entry.get("tenants")
    if not isinstance(tenants, list) or not tenants or not all(isinstance(t, str) and t for t in tenants):
        raise InvalidArgument(f"{where}.tenants", 'must be a non-empty list of tenant ids, or ["*"] for every tenant')
    return Dataset(name=name, folder=(base / folder).resolve(), split=split, tenants=tuple(tenants))


def _lines(path: Path, name: str):
    """The file's lines (decoded, bounded); a problem is the dataset's, its path is not shown."""
    try:
        with path.open("rb") as f:
            for n, raw in enumerate(f, 1):
                if len(raw) > MAX_LINE_BYTES:
                    raise InvalidArgument("dataset", f"'{name}': {path.name} line {n} is too long")
                yield n, raw.decode("utf-8")
    except UnicodeDecodeError:
        raise InvalidArgument("dataset", f"'{name}': {path.name} is not UTF-8") from None
    except OSError:
        raise InvalidArgument("dataset", f"'{name}': {path.name} cannot be read (ask the operator)") from None


def _qrels(path: Path, name: str) -> dict[str, dict[str, float]]:
    judged: dict[str, dict[str, float]] = {}
    for n, line in _lines(path, name):
        cols = [c.strip() for c in line.rstrip("\r\n").split("\t")]
        if n == 1 and tuple(cols) == QRELS_HEADER or not line.strip():
            continue
        if len(cols) != 3:
            raise InvalidArgument("dataset", f"'{name}': {path.name} line {n} needs 3 tab-separated columns")
        try:
            grade = float(int(cols[2]))
        except ValueError:
            raise InvalidArgument("dataset", f"'{name}': {path.name} line {n}: the score is not an integer") from None
        if grade > 0:
            judged.setdefault(cols[0], {})[cols[1]] = grade
    return judged


def _queries(path: Path, name: str, wanted: set[str]) -> dict[str, str]:
    texts: dict[str, str] = {}
    for n, line in _lines(path, name):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except ValueError:
            raise InvalidArgument("dataset", f"'{name}': {path.name} line {n} is not JSON") from None
        qid = str(row.get("_id", "")) if isinstance(row, dict) else ""
        text = row.get("text") if isinstance(row, dict) else None
        if qid in wanted and isinstance(text, str) and text.strip():
            texts[qid] = text.strip()[:MAX_QUERY_CHARS]
    return texts


def _natural_key(qid: str) -> tuple:
    return (0, int(qid), "") if qid.isdigit() else (1, 0, qid)


__all__ = ["ConsoleDatasets", "Dataset", "DATASET_NAME"]
