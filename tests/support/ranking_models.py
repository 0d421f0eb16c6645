"""Small, valid stored ranking models (the JSON envelope ranking/trees.py reads) for tests."""
from __future__ import annotations

import json

from ranking.features import FEATURE_NAMES, FEATURE_VERSION
from ranking.trees import MODEL_FORMAT


def linear_model(first_weight: float = 0.5, top_n: int = 30, **over) -> bytes:
    """A linear model's bytes: a residual `first_weight` on the first feature (bm25_title)."""
    m = len(FEATURE_NAMES)
    doc = {"format": MODEL_FORMAT, "kind": "linear", "feature_version": FEATURE_VERSION,
           "feature_names": list(FEATURE_NAMES), "init_scale": 10.0, "calibration": [1.0, 0.0], "top_n": top_n,
           "center": [0.0] * m, "scale": [1.0] * m, "weights": [first_weight] + [0.0] * (m - 1)}
    doc.update(over)
    return json.dumps(doc).encode()
