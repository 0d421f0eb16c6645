"""ONNX Runtime execution of a sentence-transformers model: Transformer → mean pooling → L2 norm.

Only the transformer runs in ONNX Runtime; tokenisation (the model folder's own tokenizer,
truncated at the model's `max_seq_length`, padded to the longest text of each batch), mean
pooling over the attention mask and L2 normalisation happen here, exactly as
sentence-transformers does them.

The ONNX file is exported once with the TorchScript exporter (`dynamo=False`: needs the `onnx`
package, not `onnxscript`), tracing eager (not SDPA) attention, into a cache directory under a
name keyed by the SHA-256 of the transformer's config.json and weights plus the torch /
transformers versions and our export format: a changed model or toolchain gets a fresh export,
an unchanged one is reused.
No offline graph rewriting beyond ONNX Runtime's own optimisation at session load
(ORT_ENABLE_ALL): a pass of its transformer optimizer over the export (fused attention,
LayerNorm, GELU kernels; same vectors to 2e-7) measured no faster for single queries
(`python -m lab.onnx_session` at `46fad46`, 2 threads spinning within runs: 3.35 vs
3.33 ms p50 fused vs plain, 3.66 vs 3.41 in a second run) and was dropped.
The file is written to a temporary name, fsynced and `os.replace`d, so a crash never leaves a
half-written file under the cached name; after a fresh export, older exports of the same
model name in the cache directory are removed. `load_onnx_encoder` checks every session against
the torch model on fixed probe texts before handing it out.
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import re
import tempfile
import threading
import time
import warnings
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

log = logging.getLogger(__name__)

ONNX_OPSET = 17
EXPORT_FORMAT = 4          # bump whenever the export changes (wrapper, names, opset, attention;
                           # 3 was the fused graph, see the module docstring)
OUTPUT_NAME = "last_hidden_state"
PARITY_TOLERANCE = 1e-4    # max |ONNX − torch| over the probe vectors (measured: ~2e-7)
# Padded tokens per session.run. ONNX Runtime's cost per token grows with the run's size
# (attention, cache misses); on the 2-core reference box (2 threads), calls of 64 SciFact
# abstracts (256 tokens) ran at 43 / 41 / 39 / 36 texts/s with 512 / 1024 / 2048 / 4096 tokens
# per run and 32 in one run; calls of 64 short claims at 375 / 325 / 280 texts/s with
# 512 / 1024 / 2048 (one run).
TOKENS_PER_RUN = 512
PROBE_TEXTS = (   # padding within a run, a one-word text, truncation at 256 tokens, two runs
    "Vitamin D supplementation increases bone mineral density in older adults.",
    "Short.",
    "The immune system uses T cells, B cells and antibodies to protect the body against "
    "pathogens such as viruses and bacteria.",
    " ".join(["Long probe text that is cut at the maximum sequence length."] * 40),
)

Encode = Callable[[Sequence[str]], NDArray[np.float32]]


class OnnxUnusable(Exception):
    """The ONNX path cannot serve this model; the message says why."""


def default_onnx_cache_dir() -> Path:
    """`$XDG_CACHE_HOME/nucleus/onnx`, else `~/.cache/nucleus/onnx`."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "nucleus" / "onnx"


# -- the model folder ------------------------------------------------------------------------

def transformer_dir(model_path: str) -> Path:
    """The folder of the model's Transformer module, after checking that the folder's module
    stack is one this encoder reproduces: Transformer → mean Pooling → optional Normalize."""
    root = Path(model_path)
    try:
        modules = json.loads((root / "modules.json").read_text(encoding="utf-8"))
        kinds = [module["type"].rsplit(".", 1)[-1] for module in modules]
        if kinds not in (["Transformer", "Pooling"], ["Transformer", "Pooling", "Normalize"]):
            raise OnnxUnusable(f"module stack {kinds} is not Transformer → Pooling → [Normalize]")
        pooling_config = root / modules[1]["path"] / "config.json"
        pooling = json.loads(pooling_config.read_text(encoding="utf-8"))
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise OnnxUnusable(f"cannot read the module configuration in {root}: {err}") from err
    mode = _pooling_mode(pooling)
    if mode != "mean":
        raise OnnxUnusable(f"pooling mode {mode!r} is not supported (only 'mean')")
    return root / modules[0].get("path", "")


def _pooling_mode(config: dict[str, Any]) -> str:
    """'mean' for both the newer (`pooling_mode`) and the older (`pooling_mode_*_tokens`) keys."""
    if "pooling_mode" in config:
        return str(config["pooling_mode"])
    enabled = (key.removeprefix("pooling_mode_").removesuffix("_tokens").removesuffix("_token")
               for key, value in config.items()
               if key.startswith("pooling_mode_") and value is True)
    return "+".join(sorted(enabled))


def export_key(model_dir: Path) -> str:
    """Hex digest of everything the exported graph depends on: config.json, the weights
    (SHA-256 of their content, ~60 ms for MiniLM), the exporter toolchain and our format."""
    import torch
    import transformers

    digest = hashlib.sha256()
    for part in (f"format={EXPORT_FORMAT}", f"opset={ONNX_OPSET}", f"torch={torch.__version__}",
                 f"transformers={transformers.__version__}"):
        digest.update(part.encode() + b"\0")
    names = sorted(name for name in os.listdir(model_dir)
                   if name == "config.json" or name.endswith((".safetensors", ".bin")))
    if "config.json" not in names or len(names) < 2:
        raise OnnxUnusable(f"no config.json and weights file in {model_dir}")
    for name in names:
        with open(model_dir / name, "rb") as handle:
            digest.update(name.encode() + b"\0" + hashlib.file_digest(handle, "sha256").digest())
    return digest.hexdigest()[:24]


def cache_file(cache_dir: Path, model_name: str, key: str) -> Path:
    safe_name = re.sub(r"[^A-Za-z0-9._-]+", "_", model_name) or "model"
    return cache_dir / f"{safe_name}-{key}.onnx"


# -- export ----------------------------------------------------------------------------------

def export_onnx(st_model: Any, dest: Path) -> None:
    """Export the transformer of `st_model` (a SentenceTransformer) to `dest`, atomically."""
    tokenizer = st_model.tokenizer
    dummy = tokenizer(list(PROBE_TEXTS[:2]), padding=True, return_tensors="pt")  # padded batch
    input_names = [name for name in tokenizer.model_input_names if name in dummy]
    axes = {name: {0: "batch", 1: "sequence"} for name in (*input_names, OUTPUT_NAME)}
    wrapper = positional_module(st_model[0].auto_model, input_names, OUTPUT_NAME)
    with _eager_attention(wrapper.model):
        export_atomically(wrapper, tuple(dummy[name] for name in input_names), dest, input_names, OUTPUT_NAME, axes)


def export_atomically(module: Any, inputs: tuple[Any, ...], dest: Path, input_names: list[str], output_name: str,
                      dynamic_axes: dict[str, dict[int, str]]) -> None:
    """torch.onnx.export of `module` to a temporary file beside `dest`, fsynced, then renamed to
    `dest`: a reader sees the whole export or none."""
    import torch

    dest.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=dest.parent, prefix=f".{dest.name}.", suffix=".tmp")
    os.close(fd)
    try:
        with warnings.catch_warnings(), torch.no_grad():
            warnings.simplefilter("ignore")   # legacy-exporter and tracer notices, every time
            torch.onnx.export(module.eval(), inputs, tmp, input_names=input_names, output_names=[output_name],
                              dynamic_axes=dynamic_axes, opset_version=ONNX_OPSET, dynamo=False)
        with open(tmp, "rb+") as handle:
            os.fsync(handle.fileno())
        os.replace(tmp, dest)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def remove_stale_exports(keep: Path) -> list[Path]:
    """Delete the other exports of `keep`'s model name in its folder (an earlier model content,
    toolchain or export format; ~90 MB each). Returns what was removed. A process still running
    from a removed file is unaffected (the file stays open); it re-exports at its next start."""
    same_model = re.compile(re.escape(keep.name[: keep.name.rindex("-") + 1]) + r"[0-9a-f]{24}\.onnx")
    removed = []
    for other in keep.parent.iterdir():
        if other.name != keep.name and same_model.fullmatch(other.name):
            with contextlib.suppress(OSError):
                other.unlink()
                removed.append(other)
    if removed:
        log.info("removed %d stale ONNX export(s): %s", len(removed), ", ".join(p.name for p in removed))
    return removed


@contextlib.contextmanager
def _eager_attention(model: Any) -> Iterator[None]:
    """Trace the plain matmul → softmax → matmul attention instead of SDPA: ONNX Runtime runs
    that graph ~35% faster on 256-token batches (one run of 64 SciFact abstracts: 31 vs 23
    texts/s) and as fast on single queries. Models without `set_attn_implementation` are
    traced as they are."""
    setter = getattr(model, "set_attn_implementation", None)
    previous = getattr(getattr(model, "config", None), "_attn_implementation", None)
    if setter is None or previous is None or previous == "eager":
        yield
        return
    setter("eager")
    try:
        yield
    finally:
        setter(previous)


def positional_module(model: Any, input_names: list[str], output: str) -> Any:
    """Wrap a Hugging Face model so the exporter can call it positionally (its `forward`
    takes keyword arguments in an order that differs from the tokenizer's) and gets its
    `output` ("last_hidden_state", "logits")."""
    import torch

    class Positional(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = model

        def forward(self, *inputs: Any) -> Any:
            return getattr(self.model(**dict(zip(input_names, inputs))), output)

    return Positional()


# -- inference -------------------------------------------------------------------------------

def mean_pool_normalize(hidden: NDArray[np.float32],
                        attention_mask: NDArray[np.integer]) -> NDArray[np.float32]:
    """sentence-transformers' mean pooling (mask-weighted, count clamped at 1e-9) followed by
    its Normalize (L2, norm clamped at 1e-12)."""
    mask = attention_mask.astype(np.float32)
    pooled = np.einsum("bsd,bs->bd", hidden, mask) / np.maximum(mask.sum(axis=1), 1e-9)[:, None]
    norms = np.linalg.norm(pooled, axis=1, keepdims=True)
    return (pooled / np.maximum(norms, 1e-12)).astype(np.float32, copy=False)


class OnnxEncoder:
    """Encodes texts with an ONNX Runtime session; same results as `SentenceTransformer.encode(
    ..., normalize_embeddings=True)` for the supported module stack.

    Texts are sorted by token count (longest first, so each group pads to similar lengths)
    and run in groups of at most `tokens_per_run` padded tokens: 2 texts of 256 tokens, 32 of
    16 (see `TOKENS_PER_RUN`); results are put back in input order."""

    def __init__(self, session: Any, tokenizer: Any, *, max_seq_length: int,
                 tokens_per_run: int = TOKENS_PER_RUN, concurrent_session: Any = None) -> None:
        """`concurrent_session` (optional): a session of the same graph with fewer intra-op
        threads, for `encode(..., concurrent=True)` (see `LocalEmbedder`)."""
        self._session = session
        self._concurrent_session = concurrent_session
        self._tokenizer = tokenizer
        # A fast tokenizer keeps its truncation / padding settings in shared Rust state that each
        # call sets; two sessions tokenizing at once (concurrent callers) can interleave those
        # settings and get ragged batches. Tokenising takes microseconds: one at a time.
        self._tokenizer_lock = threading.Lock()
        self._max_seq_length = max_seq_length
        self._tokens_per_run = tokens_per_run
        self._input_names = [node.name for node in session.get_inputs()]
        self.dimension = int(session.get_outputs()[0].shape[-1])

    @property
    def has_concurrent_session(self) -> bool:
        return self._concurrent_session is not None

    def encode(self, texts: Sequence[str], *, concurrent: bool = False) -> NDArray[np.float32]:
        """L2-normalised (len(texts), dimension) float32, in input order. `concurrent=True`
        runs on the concurrent session when there is one (same graph, same vectors)."""
        texts = list(texts)
        session = self._concurrent_session if concurrent and self._concurrent_session is not None \
            else self._session
        if not texts:
            return np.empty((0, self.dimension), dtype=np.float32)
        if len(texts) * self._max_seq_length <= self._tokens_per_run:   # one run, any lengths
            return self._encode_batch(texts, session)
        out = np.empty((len(texts), self.dimension), dtype=np.float32)
        lengths = np.array([len(ids) for ids in self._tokenize(texts, padding=False)["input_ids"]])
        order = np.argsort(-lengths, kind="stable")
        start = 0
        while start < len(texts):
            size = max(1, self._tokens_per_run // max(1, int(lengths[order[start]])))
            rows = order[start:start + size]
            out[rows] = self._encode_batch([texts[i] for i in rows], session)
            start += size
        return out

    def _encode_batch(self, texts: list[str], session: Any) -> NDArray[np.float32]:
        features = self._tokenize(texts, padding=True, return_tensors="np")
        feed = {name: features[name].astype(np.int64, copy=False) for name in self._input_names}
        hidden = session.run([OUTPUT_NAME], feed)[0]
        return mean_pool_normalize(hidden, features["attention_mask"])

    def _tokenize(self, texts: list[str], **kwargs: Any) -> Any:
        """The tokenizer call sentence-transformers makes: truncate at max_seq_length, pad (when
        asked) to the longest text of the call."""
        with self._tokenizer_lock:
            return self._tokenizer(texts, truncation="longest_first", max_length=self._max_seq_length,
                                   **kwargs)


SPIN_MODES = ("never", "within_run", "always")


def open_session(path: Path, threads: int, spin: str = "") -> Any:
    """A CPU InferenceSession: full graph optimisation, `threads` intra-op threads, one
    inter-op thread (the graph is sequential; our single worker thread issues the runs).

    `spin` (SPIN_MODES): whether the pool threads busy-wait for work. "within_run": between
    the operators of a run (one wake-up per run instead of one per parallel operator, ~60 for
    MiniLM), stopping at the end of each run (`session.force_spinning_stop`); "always": ONNX
    Runtime's default, also after runs; "never". "" picks "within_run" where OMP_WAIT_POLICY is
    PASSIVE — the policy the service processes set (`services/_openmp.py`) because they share
    the cores with each other, so spinning after a run would take the CPU the KnowledgeStore and
    RAGPipeline need for the same query — else "always". SearchAndRank p50 through the stack
    (probe, 2-core box, two alternating rounds): never 17.3 / 17.5 ms, always 17.3 / 17.6,
    within_run 15.4–16.2 (in-process single queries: `python -m lab.onnx_session`)."""
    import onnxruntime as ort

    if not spin:
        passive = os.environ.get("OMP_WAIT_POLICY", "").strip().upper() == "PASSIVE"
        spin = "within_run" if passive else "always"
    if spin not in SPIN_MODES:
        raise ValueError(f"spin must be one of {SPIN_MODES}, got {spin!r}")
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    if spin == "never":
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    elif spin == "within_run":
        options.add_session_config_entry("session.force_spinning_stop", "1")
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


def parity_error(encoder: OnnxEncoder, reference: Encode) -> float:
    """Max |ONNX − reference| over the probe texts, encoded in one call (two padded runs), on
    each of the encoder's sessions."""
    want = reference(PROBE_TEXTS)
    error = 0.0
    for concurrent in (False, True) if encoder.has_concurrent_session else (False,):
        got = encoder.encode(PROBE_TEXTS, concurrent=concurrent)
        if got.shape != want.shape:
            raise OnnxUnusable(f"ONNX output shape {got.shape} differs from torch's {want.shape}")
        error = max(error, float(np.abs(got - want).max()))
    return error


# -- the whole load --------------------------------------------------------------------------

def load_onnx_encoder(st_model: Any, *, model_path: str, model_name: str, cache_dir: Path,
                      threads: int, reference: Encode, concurrent_threads: int = 0) -> OnnxEncoder:
    """An ONNX encoder for `st_model`, exported into `cache_dir` unless an export of the same
    model content is already there, and checked against `reference` (the torch encode).
    `concurrent_threads` > 0 (and fewer than `threads`) adds a second session of the same
    graph with that many intra-op threads, for `encode(..., concurrent=True)`.

    A cached file that does not load or fails the parity check is exported again once; a
    fresh export that fails raises (OnnxUnusable, or whatever the exporter / ORT raised)."""
    import onnxruntime  # noqa: F401  (a missing runtime fails here, before any export)

    path = cache_file(cache_dir, model_name, export_key(transformer_dir(model_path)))
    fresh = not path.is_file()
    if fresh:
        _timed_export(st_model, path)
    try:
        return _checked_encoder(st_model, path, threads, reference, concurrent_threads)
    except Exception as err:
        if fresh:
            raise
        log.warning("cached ONNX export %s is unusable (%s); exporting it again", path, err)
    _timed_export(st_model, path)
    return _checked_encoder(st_model, path, threads, reference, concurrent_threads)


def _timed_export(st_model: Any, path: Path) -> None:
    start = time.perf_counter()
    export_onnx(st_model, path)
    log.info("exported the embedding model to ONNX in %.1f s: %s (%.0f MB)",
             time.perf_counter() - start, path, path.stat().st_size / 1e6)
    remove_stale_exports(path)


def _checked_encoder(st_model: Any, path: Path, threads: int, reference: Encode,
                     concurrent_threads: int = 0) -> OnnxEncoder:
    concurrent = open_session(path, concurrent_threads, "never") if 0 < concurrent_threads < threads else None
    encoder = OnnxEncoder(open_session(path, threads), st_model.tokenizer,
                          max_seq_length=int(st_model.max_seq_length), concurrent_session=concurrent)
    error = parity_error(encoder, reference)
    if not error <= PARITY_TOLERANCE:          # also catches NaN
        raise OnnxUnusable(f"ONNX output differs from torch by {error:.2e} "
                           f"(tolerance {PARITY_TOLERANCE:.0e})")
    log.info("ONNX Runtime session from %s: max |ONNX - torch| %.1e on %d probe texts",
             path, error, len(PROBE_TEXTS))
    return encoder
