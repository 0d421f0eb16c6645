"""A small BEIR-format dataset made on the spot (seeded): `write_beir(root)` writes

    root/corpus.jsonl        `docs` documents, two on each topic, each with a word no other holds
    root/queries.jsonl       `queries` judged queries (one topic each) and one nobody judged
    root/qrels/test.tsv      per query its topic's two documents, graded 2 and 1

small enough to ingest in a few seconds, with answers a ranker must find."""
from __future__ import annotations

import json
import random
from pathlib import Path

TOPICS = ("volcano", "penguin", "espresso", "glacier", "violin", "sourdough", "tornado", "chess", "honeybee",
          "submarine", "origami", "cactus", "telescope", "marathon", "tapestry", "lighthouse", "mushroom",
          "archery", "compost", "satellite", "kayak", "cheese", "glassblowing", "earthquake", "falconry",
          "pottery", "vineyard", "railway", "coral", "quilting")
FILLER = ("careful", "survey", "notes", "season", "measured", "field", "record", "compared", "history", "method",
          "region", "sample", "observed", "practice", "tradition", "modern", "equipment", "weather", "local",
          "common", "early", "famous", "small", "large", "northern", "southern", "winter", "summer")


def write_beir(root: Path, *, docs: int = 50, queries: int = 12, seed: int = 0) -> Path:
    """The dataset in `root` (created); `docs` ≤ 2 × len(TOPICS), `queries` ≤ docs // 2."""
    if not 2 <= docs <= 2 * len(TOPICS) or not 1 <= queries <= docs // 2:
        raise ValueError(f"docs in [2, {2 * len(TOPICS)}] and queries in [1, docs // 2], got {docs}, {queries}")
    rng = random.Random(seed)
    topics = rng.sample(TOPICS, docs // 2 + docs % 2)
    (root / "qrels").mkdir(parents=True)
    by_topic: dict[str, list[str]] = {}
    with (root / "corpus.jsonl").open("w", encoding="utf-8") as f:
        for i in range(docs):
            topic, other = topics[i // 2], rng.choice(TOPICS)
            doc_id = f"doc{i:03d}"
            by_topic.setdefault(topic, []).append(doc_id)
            words = " ".join(rng.sample(FILLER, 10))
            text = (f"The {topic} {words}. A {topic} study from {rng.randint(1950, 2025)} mentions the {other} "
                    f"only in passing; its catalogue word is mark{seed}x{i:03d}{rng.choice('kqvz')}.")
            f.write(json.dumps({"_id": doc_id, "title": f"{topic.capitalize()} note {i}", "text": text}) + "\n")
    judged = topics[:queries]
    with (root / "queries.jsonl").open("w", encoding="utf-8") as f:
        for j, topic in enumerate(judged):
            f.write(json.dumps({"_id": f"q{j}", "text": f"what is known about the {topic}"}) + "\n")
        f.write(json.dumps({"_id": "unjudged", "text": "a question nobody judged"}) + "\n")
    with (root / "qrels" / "test.tsv").open("w", encoding="utf-8") as f:
        f.write("query-id\tcorpus-id\tscore\n")
        for j, topic in enumerate(judged):
            for grade, doc_id in zip((2, 1), by_topic[topic]):
                f.write(f"q{j}\t{doc_id}\t{grade}\n")
    return root
