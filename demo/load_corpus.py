"""Read, check and (optionally) ingest the Acme Robotics demo corpus in demo/corpus/.

Each corpus file starts with a front-matter block between two `---` lines that holds only
`key: value` lines, lists written as `[a, b]`. This module parses that block without YAML
so it has no dependency beyond the standard library (the gRPC ingest path imports the
generated protobuf code lazily).

    python demo/load_corpus.py check                       # validate every file, print a table
    python demo/load_corpus.py ingest --target 127.0.0.1:50061 --tenant acme

`load_corpus()` / `parse_document()` are importable for tests and demo scripts.
"""
from __future__ import annotations

import argparse
import datetime as dt
import sys
from dataclasses import dataclass, field
from pathlib import Path

CORPUS_DIR = Path(__file__).resolve().parent / "corpus"
SAMPLE_QUERIES = Path(__file__).resolve().parent / "sample_queries.txt"

REQUIRED_KEYS = (
    "id", "title", "source_type", "source_id", "source_uri", "created", "modified",
    "owners", "tags", "reputation", "groups",
)
LIST_KEYS = ("owners", "tags", "groups")
MIN_WORDS, MAX_WORDS = 120, 400


class CorpusError(ValueError):
    pass


@dataclass(frozen=True)
class CorpusDocument:
    id: str
    title: str
    source_type: str
    source_id: str
    source_uri: str
    created: dt.date
    modified: dt.date
    owners: list[str]
    tags: list[str]
    reputation: float
    groups: list[str]
    body: str
    path: Path
    extra: dict[str, str] = field(default_factory=dict)

    @property
    def file_type(self) -> str:
        return self.path.suffix.lstrip(".").lower()

    @property
    def content_type(self) -> str:
        return "text/markdown" if self.file_type == "md" else "text/plain"

    @property
    def word_count(self) -> int:
        return len(self.body.split())

    @staticmethod
    def unix(day: dt.date) -> int:
        return int(dt.datetime(day.year, day.month, day.day, tzinfo=dt.timezone.utc).timestamp())


def _parse_value(key: str, raw: str) -> object:
    raw = raw.strip()
    if key in LIST_KEYS:
        if not (raw.startswith("[") and raw.endswith("]")):
            raise CorpusError(f"{key}: expected a list written as [a, b], got {raw!r}")
        inner = raw[1:-1].strip()
        return [item.strip() for item in inner.split(",") if item.strip()] if inner else []
    if key in ("created", "modified"):
        try:
            return dt.date.fromisoformat(raw)
        except ValueError as exc:
            raise CorpusError(f"{key}: expected YYYY-MM-DD, got {raw!r}") from exc
    if key == "reputation":
        value = float(raw)
        if not 0.0 <= value <= 1.0:
            raise CorpusError(f"reputation must be in [0, 1], got {value}")
        return value
    return raw


def split_front_matter(text: str) -> tuple[dict[str, str], str]:
    lines = text.splitlines()
    if not lines or lines[0].strip() != "---":
        raise CorpusError("file must start with a '---' front-matter line")
    try:
        end = next(i for i in range(1, len(lines)) if lines[i].strip() == "---")
    except StopIteration as exc:
        raise CorpusError("front matter is not closed by a '---' line") from exc
    meta: dict[str, str] = {}
    for n, line in enumerate(lines[1:end], start=2):
        if not line.strip():
            continue
        key, sep, value = line.partition(":")
        if not sep or not key.strip() or " " in key.strip():
            raise CorpusError(f"line {n}: expected 'key: value', got {line!r}")
        if key.strip() in meta:
            raise CorpusError(f"line {n}: duplicate key {key.strip()!r}")
        meta[key.strip()] = value.strip()
    return meta, "\n".join(lines[end + 1:]).strip() + "\n"


def parse_document(path: Path) -> CorpusDocument:
    meta, body = split_front_matter(path.read_text(encoding="utf-8"))
    missing = [k for k in REQUIRED_KEYS if k not in meta]
    if missing:
        raise CorpusError(f"missing keys: {', '.join(missing)}")
    values = {k: _parse_value(k, meta[k]) for k in REQUIRED_KEYS}
    extra = {k: v for k, v in meta.items() if k not in REQUIRED_KEYS}
    return CorpusDocument(**values, body=body, path=path, extra=extra)  # type: ignore[arg-type]


def corpus_files(corpus_dir: Path = CORPUS_DIR) -> list[Path]:
    return sorted(
        p for p in corpus_dir.iterdir()
        if p.is_file() and p.suffix in (".md", ".txt") and p.name.lower() != "readme.md"
    )


def load_corpus(corpus_dir: Path = CORPUS_DIR) -> list[CorpusDocument]:
    docs = []
    for path in corpus_files(corpus_dir):
        try:
            docs.append(parse_document(path))
        except CorpusError as exc:
            raise CorpusError(f"{path.name}: {exc}") from exc
    return docs


def check(docs: list[CorpusDocument], today: dt.date | None = None) -> list[str]:
    """Return a list of problems (empty = the corpus is well formed)."""
    today = today or dt.date.today()
    problems: list[str] = []
    seen: dict[str, Path] = {}
    for d in docs:
        where = d.path.name
        if d.id in seen:
            problems.append(f"{where}: duplicate id {d.id!r} (also {seen[d.id].name})")
        seen[d.id] = d.path
        if d.path.stem != d.id:
            problems.append(f"{where}: file name does not match id {d.id!r}")
        if d.modified < d.created:
            problems.append(f"{where}: modified {d.modified} is before created {d.created}")
        if d.modified > today:
            problems.append(f"{where}: modified {d.modified} is in the future")
        if not MIN_WORDS <= d.word_count <= MAX_WORDS:
            problems.append(f"{where}: {d.word_count} words, expected {MIN_WORDS}-{MAX_WORDS}")
    return problems


def to_protos(docs: list[CorpusDocument]):
    """Build nucleus.v1.Document messages (imports the generated code lazily)."""
    from nucleus.v1 import common_pb2, knowledge_store_pb2

    out = []
    for d in docs:
        artifact = common_pb2.ArtifactMetadata(
            artifact_id=d.id,
            title=d.title,
            source_type=d.source_type,
            source_id=d.source_id,
            source_uri=d.source_uri,
            file_name=d.path.name,
            file_type=d.file_type,
            created_unix=d.unix(d.created),
            modified_unix=d.unix(d.modified),
            owners=d.owners,
            tags=d.tags,
            reputation_prior=d.reputation,
            visibility_groups=d.groups,
        )
        out.append(knowledge_store_pb2.Document(artifact=artifact, content=d.body, content_type=d.content_type))
    return out


def ingest(docs: list[CorpusDocument], target: str, tenant: str, persona: str = "", timeout_s: float = 300.0):
    import grpc

    from nucleus.v1 import knowledge_store_pb2, knowledge_store_pb2_grpc

    with grpc.insecure_channel(target) as channel:
        stub = knowledge_store_pb2_grpc.KnowledgeStoreStub(channel)
        request = knowledge_store_pb2.IngestDocumentsRequest(
            tenant_id=tenant, persona_id=persona, documents=to_protos(docs)
        )
        return stub.IngestDocuments(request, timeout=timeout_s)


def sample_queries(path: Path = SAMPLE_QUERIES) -> list[str]:
    return [line.strip() for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def _main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    sub.add_parser("check", help="validate the corpus and print a summary table")
    p_ingest = sub.add_parser("ingest", help="send the corpus to KnowledgeStore.IngestDocuments")
    p_ingest.add_argument("--target", default="127.0.0.1:50061")
    p_ingest.add_argument("--tenant", default="acme")
    p_ingest.add_argument("--persona", default="")
    args = parser.parse_args(argv)

    try:
        docs = load_corpus()
    except CorpusError as exc:
        print(f"corpus error: {exc}", file=sys.stderr)
        return 1
    problems = check(docs)
    if args.cmd == "check":
        for d in docs:
            groups = ",".join(d.groups) or "-"
            print(f"{d.id:45} {d.source_id:17} {d.source_type:14} {d.modified} rep={d.reputation:.2f} "
                  f"words={d.word_count:3} groups={groups}")
        for p in problems:
            print(f"PROBLEM {p}", file=sys.stderr)
        print(f"{len(docs)} documents, {len({d.source_id for d in docs})} sources, {len(problems)} problems")
        return 1 if problems else 0
    if problems:
        print("\n".join(problems), file=sys.stderr)
        return 1
    response = ingest(docs, args.target, args.tenant, args.persona)
    print(f"ingested {len(response.results)} documents, {response.total_entries} entries "
          f"(embed {response.embed_seconds:.2f}s, commit {response.commit_seconds:.2f}s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(_main())
