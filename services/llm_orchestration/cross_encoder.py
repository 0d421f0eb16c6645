"""A local cross-encoder re-ranker: (query, passage) pairs → relevance in [0, 1].

The model is a directory an operator configures (`NUCLEUS_LLM_CROSS_ENCODER_PATH`): a Hugging
Face sequence-classification model — `config.json`, tokenizer files, weights — which is also
the layout sentence-transformers' `CrossEncoder.save()` writes (e.g. a saved
cross-encoder/ms-marco-MiniLM-L-6-v2). ONNX Runtime first, as the embedder runs:

    <dir>/onnx/model.onnx or <dir>/model.onnx   used as shipped, when the directory has one
    otherwise                                   exported once with torch into the ONNX cache
                                                directory, named by the SHA-256 of config.json
                                                and the weights (a changed model gets a fresh
                                                export), written atomically, and checked
                                                against torch on probe pairs before use
    ONNX Runtime unusable                       torch runs the model (logged; `runtime` says so)

Scoring: pairs are tokenised as `[CLS] query [SEP] passage [SEP]`, truncated to `max_length`
tokens (default 256) with the "only_second" strategy — the query is kept whole and the
passage's tail is cut — except when the query alone leaves fewer than 16 passage tokens, then
both are cut ("longest_first"). Pairs run in batches of `batch_size` (default 16), each padded
to its longest pair. One logit → sigmoid; two (not relevant, relevant) → softmax of the second.
`last_truncated` counts the pairs the last call cut.
"""
from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import os
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from shared.errors import InvalidArgument

from .onnx_encoder import ONNX_OPSET, export_atomically, open_session, positional_module

log = logging.getLogger(__name__)

EXPORT_FORMAT = 1
MIN_PASSAGE_TOKENS = 16
PARITY_TOLERANCE = 1e-3          # max |ONNX − torch| logit on the probe pairs
PROBE_PAIRS = (("what is the battery charging temperature", "Charge between 5 °C and 45 °C."),
               ("short", " ".join(["A long passage that is cut at the maximum length."] * 60)))
OUTPUT_NAME = "logits"


def _sigmoid(x: NDArray[np.float64]) -> NDArray[np.float64]:
    return 1.0 / (1.0 + np.exp(-x))


def logits_to_unit(logits: NDArray[np.floating]) -> NDArray[np.float32]:
    """(n, 1) logits → sigmoid; (n, 2) → softmax probability of label 1. In [0, 1]."""
    logits = np.asarray(logits, dtype=np.float64)
    if logits.ndim == 1:
        logits = logits[:, None]
    if logits.shape[1] == 1:
        return _sigmoid(logits[:, 0]).astype(np.float32)
    if logits.shape[1] == 2:
        return _sigmoid(logits[:, 1] - logits[:, 0]).astype(np.float32)
    raise InvalidArgument("cross_encoder_path", f"the model has {logits.shape[1]} labels; a cross-encoder "
                                                "has 1 (a relevance logit) or 2 (not relevant, relevant)")


def _model_files(model_dir: Path) -> list[str]:
    return sorted(n for n in os.listdir(model_dir) if n == "config.json" or n.endswith((".safetensors", ".bin")))


def _export_key(model_dir: Path) -> str:
    import torch
    import transformers

    digest = hashlib.sha256()
    for part in (f"format={EXPORT_FORMAT}", f"opset={ONNX_OPSET}", f"torch={torch.__version__}",
                 f"transformers={transformers.__version__}"):
        digest.update(part.encode() + b"\0")
    for name in _model_files(model_dir):
        with open(model_dir / name, "rb") as handle:
            digest.update(name.encode() + b"\0" + hashlib.file_digest(handle, "sha256").digest())
    return digest.hexdigest()[:24]


class CrossEncoder:
    """Loaded once (`load`, in a worker thread); `score` is thread-safe (one run at a time)."""

    def __init__(self, model_dir: str, *, max_length: int = 256, batch_size: int = 16,
                 onnx_cache_dir: str = "", threads: int = 0, runtime: str = "onnx") -> None:
        self.model_dir = Path(model_dir)
        if max_length < MIN_PASSAGE_TOKENS * 2:
            raise InvalidArgument("cross_encoder_max_length", f"{max_length} is too small; at least "
                                                              f"{MIN_PASSAGE_TOKENS * 2} tokens")
        if batch_size <= 0:
            raise InvalidArgument("cross_encoder_batch_size", f"must be positive, got {batch_size}")
        if runtime not in ("onnx", "torch"):
            raise InvalidArgument("runtime", f"{runtime!r} is not 'onnx' or 'torch'")
        self.max_length = max_length
        self.batch_size = batch_size
        self._cache_dir = Path(onnx_cache_dir) if onnx_cache_dir else None
        self._threads = threads or max(1, min(os.cpu_count() or 1, 4))
        self._want = runtime
        self.runtime = ""                # "onnx" | "torch" once loaded
        self.model_name = self.model_dir.name or "cross-encoder"
        self.last_truncated = 0
        self._tokenizer: Any = None
        self._session: Any = None
        self._torch_model: Any = None
        self._lock = threading.Lock()

    # -- loading ------------------------------------------------------------------------------

    def load(self) -> None:
        from transformers import AutoTokenizer

        if not (self.model_dir / "config.json").is_file():
            raise InvalidArgument("cross_encoder_path", f"{self.model_dir} has no config.json; a Hugging Face "
                                                        "sequence-classification (CrossEncoder) folder is required")
        try:
            config = json.loads((self.model_dir / "config.json").read_text(encoding="utf-8"))
        except (OSError, ValueError) as err:
            raise InvalidArgument("cross_encoder_path",
                                  f"cannot read {self.model_dir / 'config.json'}: {err}") from None
        self.model_name = str(config.get("_name_or_path") or self.model_dir.name) or self.model_dir.name
        positions = config.get("max_position_embeddings")
        if isinstance(positions, int) and 0 < positions < self.max_length:
            log.warning("cross-encoder %s: max_length %d exceeds the model's max_position_embeddings %d; "
                        "pairs are cut to %d tokens", self.model_dir, self.max_length, positions, positions)
            self.max_length = positions       # longer inputs would fail every scoring call
        self._tokenizer = AutoTokenizer.from_pretrained(str(self.model_dir))
        if self._want == "onnx":
            try:
                self._session = self._onnx_session()
                self.runtime = "onnx"
                return
            except Exception as err:  # noqa: BLE001 - any failure: fall back to torch, say why
                log.warning("cross-encoder %s: ONNX Runtime unusable (%s: %s); running it with torch",
                            self.model_dir, type(err).__name__, err)
        self._torch_model = self._load_torch()
        self.runtime = "torch"

    def _load_torch(self) -> Any:
        from transformers import AutoModelForSequenceClassification

        model = AutoModelForSequenceClassification.from_pretrained(str(self.model_dir))
        return model.eval()

    def _onnx_session(self) -> Any:
        for shipped in (self.model_dir / "onnx" / "model.onnx", self.model_dir / "model.onnx"):
            if shipped.is_file():
                return open_session(shipped, self._threads)
        from .onnx_encoder import default_onnx_cache_dir

        cache = self._cache_dir or default_onnx_cache_dir()
        path = cache / f"cross-encoder-{_export_key(self.model_dir)}.onnx"
        model = self._load_torch()
        if not path.is_file():
            self._export(model, path)
        session = open_session(path, self._threads)
        features = self._features(list(PROBE_PAIRS))
        got = self._run_onnx(session, features)
        want = self._run_torch(model, features)
        error = float(np.abs(got - want).max())
        if not error <= PARITY_TOLERANCE:
            raise RuntimeError(f"ONNX logits differ from torch by {error:.2e}")
        return session

    def _export(self, model: Any, dest: Path) -> None:
        features = self._features(list(PROBE_PAIRS), return_tensors="pt")
        names = [n for n in ("input_ids", "attention_mask", "token_type_ids") if n in features]
        export_atomically(positional_module(model, names, OUTPUT_NAME), tuple(features[n] for n in names), dest, names,
                          OUTPUT_NAME, {**{n: {0: "batch", 1: "sequence"} for n in names}, OUTPUT_NAME: {0: "batch"}})
        log.info("exported cross-encoder %s to ONNX: %s", self.model_dir, dest)

    # -- scoring ------------------------------------------------------------------------------

    def _features(self, pairs: list[tuple[str, str]], return_tensors: str = "np") -> Any:
        queries = [q for q, _ in pairs]
        passages = [p for _, p in pairs]
        query_tokens = max(len(ids) for ids in self._tokenizer(queries, add_special_tokens=False)["input_ids"])
        strategy = "only_second" if query_tokens + 3 + MIN_PASSAGE_TOKENS <= self.max_length else "longest_first"
        return self._tokenizer(queries, passages, truncation=strategy, max_length=self.max_length, padding=True,
                               return_tensors=return_tensors)

    def _run_onnx(self, session: Any, features: Any) -> NDArray[np.float32]:
        names = [node.name for node in session.get_inputs()]
        feed = {n: np.asarray(features[n]).astype(np.int64, copy=False) for n in names}
        return np.asarray(session.run([OUTPUT_NAME], feed)[0], dtype=np.float32)

    @staticmethod
    def _run_torch(model: Any, features: Any) -> NDArray[np.float32]:
        import torch

        with torch.no_grad():
            tensors = {k: torch.as_tensor(np.asarray(v)) for k, v in features.items()}
            return model(**tensors).logits.float().numpy()

    def truncated_count(self, query: str, texts: Sequence[str]) -> int:
        """How many of the pairs exceed `max_length` tokens (and are cut)."""
        q = len(self._tokenizer(query, add_special_tokens=False)["input_ids"])
        lengths = [len(ids) for ids in self._tokenizer(list(texts), add_special_tokens=False)["input_ids"]]
        return sum(q + n + 3 > self.max_length for n in lengths)

    def score_sync(self, query: str, texts: Sequence[str]) -> NDArray[np.float32]:
        """Relevance in [0, 1] of each text for `query`, in input order."""
        if self._tokenizer is None:
            raise RuntimeError("cross-encoder not loaded")
        texts = list(texts)
        out = np.empty(len(texts), dtype=np.float32)
        with self._lock:
            for start in range(0, len(texts), self.batch_size):
                chunk = texts[start:start + self.batch_size]
                features = self._features([(query, t) for t in chunk])
                logits = (self._run_onnx(self._session, features) if self._session is not None
                          else self._run_torch(self._torch_model, features))
                out[start:start + len(chunk)] = logits_to_unit(logits)
            self.last_truncated = self.truncated_count(query, texts)
        return out

    async def score(self, query: str, texts: Sequence[str]) -> NDArray[np.float32]:
        return await asyncio.to_thread(self.score_sync, query, texts)
