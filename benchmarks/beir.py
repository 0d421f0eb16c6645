"""Load a BEIR-format dataset directory, checking every line.

    <root>/corpus.jsonl        {"_id": str, "title": str, "text": str}   one document a line
    <root>/queries.jsonl       {"_id": str, "text": str}                 one query a line
    <root>/qrels/<split>.tsv   header `query-id<TAB>corpus-id<TAB>score`, then one judgement a line

Every problem raises `InvalidArgument` whose field is `path:line` (line 1-based) and whose
message says what is wrong and what is accepted, so a user can open the file at that line.
Ids become artifact ids in the KnowledgeStore, which reserves '#' for entry ids: an id that
contains it is rejected here rather than half-way through an ingest.
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

from shared.errors import InvalidArgument

QRELS_HEADER = ("query-id", "corpus-id", "score")
MAX_ID_CHARS = 512


@dataclass(frozen=True, slots=True)
class Doc:
    id: str
    title: str
    text: str

    @property
    def body(self) -> str:
        """What is indexed and embedded: title and text (either may be empty)."""
        return f"{self.title}\n{self.text}" if self.title else self.text


@dataclass(frozen=True, slots=True)
class BeirDataset:
    root: Path
    name: str
    split: str
    corpus: tuple[Doc, ...]                    # file order
    queries: dict[str, str]                    # query id -> text
    qrels: dict[str, dict[str, int]]           # query id -> {doc id: relevance}
    fingerprint: str                           # sha256 of corpus.jsonl, 16 hex digits

    @property
    def evaluated_query_ids(self) -> list[str]:
        """Queries with at least one relevant (score > 0) judgement, in a stable order."""
        return sorted((q for q, rels in self.qrels.items() if any(r > 0 for r in rels.values())),
                      key=_natural_key)


def load_dataset(root: Path | str, split: str = "test") -> BeirDataset:
    root = Path(root)
    if not root.is_dir():
        raise InvalidArgument(str(root), "is not a directory; expected a BEIR dataset folder with corpus.jsonl, "
                                         "queries.jsonl and qrels/<split>.tsv")
    corpus_path = root / "corpus.jsonl"
    corpus = load_corpus(corpus_path)
    queries = load_queries(root / "queries.jsonl")
    qrels = load_qrels(root / "qrels" / f"{split}.tsv", {d.id for d in corpus}, queries)
    return BeirDataset(root=root.resolve(), name=root.resolve().name, split=split, corpus=corpus,
                       queries=queries, qrels=qrels, fingerprint=file_fingerprint(corpus_path))


def file_fingerprint(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()[:16]


def load_corpus(path: Path) -> tuple[Doc, ...]:
    docs: list[Doc] = []
    first_line: dict[str, int] = {}
    for lineno, obj in _jsonl(path):
        where = f"{path}:{lineno}"
        doc_id = _id(obj, where)
        title = _optional_text(obj, "title", where)
        text = _optional_text(obj, "text", where)
        if not (title.strip() or text.strip()):
            raise InvalidArgument(where, f"document {doc_id!r} has neither title nor text; at least one is required")
        if doc_id in first_line:
            raise InvalidArgument(where, f"document id {doc_id!r} repeats line {first_line[doc_id]}; "
                                         "ids must be unique")
        first_line[doc_id] = lineno
        docs.append(Doc(doc_id, title, text))
    if not docs:
        raise InvalidArgument(str(path), "holds no documents; expected one JSON object per line")
    return tuple(docs)


def load_queries(path: Path) -> dict[str, str]:
    queries: dict[str, str] = {}
    first_line: dict[str, int] = {}
    for lineno, obj in _jsonl(path):
        where = f"{path}:{lineno}"
        qid = _id(obj, where)
        text = obj.get("text")
        if not isinstance(text, str) or not text.strip():
            raise InvalidArgument(where, f"query {qid!r} needs a non-empty string \"text\"")
        if qid in first_line:
            raise InvalidArgument(where, f"query id {qid!r} repeats line {first_line[qid]}; ids must be unique")
        first_line[qid] = lineno
        queries[qid] = text
    if not queries:
        raise InvalidArgument(str(path), "holds no queries; expected one JSON object per line")
    return queries


def load_qrels(path: Path, doc_ids: set[str], queries: dict[str, str]) -> dict[str, dict[str, int]]:
    if not path.is_file():
        raise InvalidArgument(str(path), "does not exist; expected a TSV with header "
                                         "'query-id<TAB>corpus-id<TAB>score' (choose the file with --split)")
    qrels: dict[str, dict[str, int]] = {}
    with path.open(encoding="utf-8") as f:
        for lineno, raw in enumerate(f, 1):
            where = f"{path}:{lineno}"
            line = raw.rstrip("\r\n")
            if lineno == 1:
                if tuple(c.strip() for c in line.split("\t")) != QRELS_HEADER:
                    raise InvalidArgument(where, f"header is {line!r}; expected 'query-id<TAB>corpus-id<TAB>score'")
                continue
            if not line.strip():
                continue
            cols = line.split("\t")
            if len(cols) != 3:
                raise InvalidArgument(where, f"has {len(cols)} tab-separated columns; expected 3 "
                                             "(query-id, corpus-id, score)")
            qid, did, score = (c.strip() for c in cols)
            try:
                rel = int(score)
            except ValueError:
                raise InvalidArgument(where, f"score {score!r} is not an integer; expected a graded relevance "
                                             "such as 0, 1 or 2") from None
            if qid not in queries:
                raise InvalidArgument(where, f"query id {qid!r} is not in queries.jsonl")
            if did not in doc_ids:
                raise InvalidArgument(where, f"corpus id {did!r} is not in corpus.jsonl")
            judged = qrels.setdefault(qid, {})
            if did in judged and judged[did] != rel:
                raise InvalidArgument(where, f"({qid!r}, {did!r}) is judged twice with different scores")
            judged[did] = rel
    if not qrels:
        raise InvalidArgument(str(path), "holds no judgements after the header")
    return qrels


def _jsonl(path: Path):
    if not path.is_file():
        raise InvalidArgument(str(path), "does not exist; expected one JSON object per line")
    with path.open(encoding="utf-8") as f:
        lineno = 0
        while True:
            lineno += 1
            try:
                line = f.readline()
            except UnicodeDecodeError as err:
                raise InvalidArgument(f"{path}:{lineno}", f"is not UTF-8 ({err.reason})") from None
            if not line:
                return
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as err:
                raise InvalidArgument(f"{path}:{lineno}",
                                      f"is not valid JSON ({err.msg} at column {err.colno})") from None
            if not isinstance(obj, dict):
                raise InvalidArgument(f"{path}:{lineno}", f"is a JSON {type(obj).__name__}; expected an object")
            yield lineno, obj


def _id(obj: dict, where: str) -> str:
    value = obj.get("_id")
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        raise InvalidArgument(where, "needs an \"_id\" string")
    value = str(value).strip()
    if not value:
        raise InvalidArgument(where, "\"_id\" is empty")
    if len(value) > MAX_ID_CHARS:
        raise InvalidArgument(where, f"\"_id\" has {len(value)} characters; at most {MAX_ID_CHARS} accepted")
    if "#" in value:
        raise InvalidArgument(where, f"\"_id\" {value!r} contains '#', which the KnowledgeStore reserves for entry ids")
    if any(ord(c) < 32 or ord(c) == 127 for c in value):
        raise InvalidArgument(where, "\"_id\" contains control characters")
    return value


def _optional_text(obj: dict, key: str, where: str) -> str:
    value = obj.get(key, "")
    if value is None:
        return ""
    if not isinstance(value, str):
        raise InvalidArgument(where, f"\"{key}\" is a JSON {type(value).__name__}; expected a string")
    return value


def _natural_key(qid: str) -> tuple:
    return (0, int(qid), "") if qid.isdigit() else (1, 0, qid)
