"""The ONNX Runtime path of LocalEmbedder against the real all-MiniLM-L6-v2 and torch.

One ONNX export (into a per-module temporary cache) and one torch model are shared; the tests
that need their own start (cache reuse, a corrupt cache file, an unusable cache dir) load the
model again, which is quick once torch and the files are warm.
"""
import asyncio
import logging
import os

import numpy as np
import pytest
import pytest_asyncio

from services.llm_orchestration import onnx_encoder
from services.llm_orchestration.core import LlmOrchestrator
from services.llm_orchestration.embedder import LocalEmbedder
from shared.settings import LlmOrchestrationSettings

pytestmark = [pytest.mark.asyncio(loop_scope="module"), pytest.mark.slow]

LONG = " ".join(["Randomised trials of vitamin D in older adults."] * 40)  # > 256 tokens
TEXTS = [       # mixed lengths in no particular order: sorting and grouping must be undone
    "Short.",
    LONG,
    "Aspirin lowers the risk of a second heart attack.",
    LONG.replace("vitamin D", "statins"),
    "x",
    "A much longer text about the immune system, T cells, B cells and antibodies, which "
    "together protect the body against pathogens such as viruses and bacteria.",
    LONG.replace("older adults", "children"),
    "Regular exercise reduces the risk of cardiovascular disease.",
]


async def started(**kwargs) -> LocalEmbedder:
    embedder = LocalEmbedder(**kwargs)
    await embedder.start()
    return embedder


def onnx_files(folder) -> list[str]:
    return sorted(os.listdir(folder)) if os.path.isdir(folder) else []


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("onnx-cache")


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def onnx_embedder(cache_dir):
    # two threads whatever the machine: the concurrent (one-thread) session exists too
    embedder = await started(runtime="onnx", onnx_cache_dir=str(cache_dir), torch_threads=2)
    assert embedder.runtime == "onnx", embedder.runtime_note   # else every test here is torch
    yield embedder
    await embedder.close()


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def torch_orch(tmp_path_factory):
    """The reference: torch, chosen through the `local_runtime` setting."""
    cache = tmp_path_factory.mktemp("unused-onnx-cache") / "onnx"
    orch = LlmOrchestrator(LlmOrchestrationSettings(local_runtime="torch",
                                                    onnx_cache_dir=str(cache)))
    await orch.start()
    yield orch
    await orch.close()


@pytest.fixture(scope="module")
def torch_embedder(torch_orch) -> LocalEmbedder:
    return torch_orch._backend


# -- parity ----------------------------------------------------------------------------------

async def test_onnx_is_the_default_and_serves_after_start(onnx_embedder):
    assert LocalEmbedder().runtime == "onnx"
    assert LlmOrchestrationSettings().local_runtime == "onnx"
    assert (onnx_embedder.runtime, onnx_embedder.runtime_note) == ("onnx", "")
    assert onnx_embedder.dimension == 384


async def test_batch_with_padding_and_grouping_matches_torch_in_input_order(onnx_embedder,
                                                                            torch_embedder):
    got = onnx_embedder.encode_sync(TEXTS)
    want = torch_embedder.encode_sync(TEXTS)
    assert got.shape == (len(TEXTS), 384) and got.dtype == np.float32
    assert float(np.abs(got - want).max()) < 1e-5
    # the same rows one text at a time: nothing was swapped by the sort / grouping
    singles = np.stack([onnx_embedder.encode_sync([text])[0] for text in TEXTS])
    assert float(np.abs(got - singles).max()) < 1e-5
    assert list(np.argmax(got @ want.T, axis=1)) == list(range(len(TEXTS)))


async def test_many_texts_take_several_runs_and_still_match_torch(onnx_embedder, torch_embedder):
    texts = [f"{text} ({i})" for i, text in enumerate(TEXTS * 3)]  # 9 long: 5+ runs
    got = onnx_embedder.encode_sync(texts)
    assert float(np.abs(got - torch_embedder.encode_sync(texts)).max()) < 1e-5


async def test_no_texts_give_an_empty_matrix(onnx_embedder):
    assert onnx_embedder.encode_sync([]).shape == (0, 384)


async def test_async_encode_runs_onnx_on_the_worker_thread(onnx_embedder, torch_embedder):
    got = await onnx_embedder.encode(TEXTS[:3])
    np.testing.assert_allclose(got, torch_embedder.encode_sync(TEXTS[:3]), atol=1e-5)


async def test_the_concurrent_session_runs_one_thread_and_gives_the_same_vectors(onnx_embedder,
                                                                                  torch_embedder):
    assert onnx_embedder.has_concurrent_session and onnx_embedder.max_inflight == 2
    sessions = (onnx_embedder._onnx._session, onnx_embedder._onnx._concurrent_session)
    assert [s.get_session_options().intra_op_num_threads for s in sessions] == [2, 1]
    main = onnx_embedder.encode_sync(TEXTS)
    concurrent = onnx_embedder.encode_sync(TEXTS, concurrent=True)
    assert float(np.abs(concurrent - main).max()) < 1e-5
    assert float(np.abs(concurrent - torch_embedder.encode_sync(TEXTS)).max()) < 1e-5
    got = await asyncio.gather(*(onnx_embedder.encode_concurrent([text]) for text in TEXTS[:4]))
    np.testing.assert_allclose(np.concatenate(got), main[:4], atol=1e-5)


async def test_no_concurrent_session_without_fewer_threads_than_the_main_one():
    assert LocalEmbedder(torch_threads=1).max_inflight == 1              # 1 thread: nothing fewer
    assert LocalEmbedder(torch_threads=2, concurrent_threads=0).max_inflight == 1
    assert LocalEmbedder(torch_threads=2, concurrent_threads=2).max_inflight == 1
    assert LocalEmbedder(torch_threads=4, concurrent_threads=1).max_inflight == 4
    assert LocalEmbedder(torch_threads=4, concurrent_threads=2).max_inflight == 2
    assert LocalEmbedder(torch_threads=4, runtime="torch").max_inflight == 1


# -- the cache -------------------------------------------------------------------------------

async def test_export_is_written_once_and_reused_by_the_next_start(onnx_embedder, cache_dir,
                                                                   caplog):
    files = onnx_files(cache_dir)
    assert len(files) == 1 and files[0].startswith("all-MiniLM-L6-v2-")
    assert files[0].endswith(".onnx")                  # no temporary file left behind
    path = cache_dir / files[0]
    before = path.stat().st_mtime_ns
    caplog.set_level(logging.INFO, logger="services.llm_orchestration")
    second = await started(runtime="onnx", onnx_cache_dir=str(cache_dir))
    try:
        assert second.runtime == "onnx"
        assert path.stat().st_mtime_ns == before
        assert onnx_files(cache_dir) == files
        assert not [r for r in caplog.records if "exported the embedding model" in r.message]
    finally:
        await second.close()


async def test_stale_exports_of_the_same_model_are_removed_and_nothing_else(tmp_path):
    keep = tmp_path / f"all-MiniLM-L6-v2-{'a' * 24}.onnx"
    stale = tmp_path / f"all-MiniLM-L6-v2-{'b' * 24}.onnx"
    others = [tmp_path / f"all-MiniLM-L6-{'c' * 24}.onnx",           # another model name
              tmp_path / f"all-MiniLM-L6-v2-{'d' * 24}.onnx.tmp",     # not an export
              tmp_path / "notes.txt"]
    for path in (keep, stale, *others):
        path.write_bytes(b"x")
    assert onnx_encoder.remove_stale_exports(keep) == [stale]
    assert sorted(onnx_files(tmp_path)) == sorted(p.name for p in (keep, *others))


async def test_a_corrupt_cached_file_is_exported_again(onnx_embedder, cache_dir, tmp_path,
                                                       torch_embedder, caplog):
    name = onnx_files(cache_dir)[0]
    garbage = b"not an onnx model" * 1000
    (tmp_path / name).write_bytes(garbage)              # the name of this model's export
    caplog.set_level(logging.INFO, logger="services.llm_orchestration")
    embedder = await started(runtime="onnx", onnx_cache_dir=str(tmp_path))
    try:
        assert embedder.runtime == "onnx"
        assert any(r.levelno == logging.WARNING and "is unusable" in r.message
                   for r in caplog.records)
        assert (tmp_path / name).stat().st_size > 10_000_000        # a whole model again
        assert not (tmp_path / name).read_bytes().startswith(garbage[:100])
        np.testing.assert_allclose(embedder.encode_sync(TEXTS[:4]),
                                   torch_embedder.encode_sync(TEXTS[:4]), atol=1e-5)
    finally:
        await embedder.close()


async def test_an_unusable_cache_dir_falls_back_to_torch_with_a_warning(tmp_path, torch_embedder,
                                                                        caplog):
    blocker = tmp_path / "a-file"
    blocker.write_text("the cache dir cannot be created under a file")
    caplog.set_level(logging.WARNING, logger="services.llm_orchestration")
    embedder = await started(runtime="onnx", onnx_cache_dir=str(blocker / "onnx"))
    try:
        assert embedder.runtime == "torch"
        assert "ONNX Runtime unusable, using torch" in embedder.runtime_note
        assert any("ONNX Runtime unusable" in r.message for r in caplog.records)
        np.testing.assert_allclose(embedder.encode_sync(TEXTS[:3]),
                                   torch_embedder.encode_sync(TEXTS[:3]), atol=1e-6)
    finally:
        await embedder.close()


async def test_a_failed_export_leaves_no_file(tmp_path, torch_embedder):
    import torch

    class Broken(torch.nn.Module):
        def forward(self, **inputs):
            raise RuntimeError("broken model")

    class FakeSentenceTransformer(list):             # the two things export_onnx uses
        tokenizer = torch_embedder._model.tokenizer

    module = type("Module", (), {"auto_model": Broken()})()
    dest = tmp_path / "model.onnx"
    with pytest.raises(RuntimeError, match="broken model"):
        onnx_encoder.export_onnx(FakeSentenceTransformer([module]), dest)
    assert os.listdir(tmp_path) == []


async def test_export_leaves_the_torch_model_on_its_own_attention(tmp_path, torch_embedder):
    model = torch_embedder._model
    before = model[0].auto_model.config._attn_implementation
    onnx_encoder.export_onnx(model, tmp_path / "m.onnx")
    assert model[0].auto_model.config._attn_implementation == before
    assert onnx_files(tmp_path) == ["m.onnx"]


# -- the torch setting -----------------------------------------------------------------------

async def test_torch_runtime_setting_serves_torch_and_never_exports(torch_orch):
    assert torch_orch.info()["runtime"] == "torch"
    assert torch_orch._backend.runtime_note == ""
    assert not torch_orch._settings.onnx_cache_dir or \
        not os.path.exists(torch_orch._settings.onnx_cache_dir)
    result = await torch_orch.embed(["torch runtime"], purpose="document")
    assert result.vectors.shape == (1, 384)


@pytest.mark.parametrize("policy,stops", [("PASSIVE", "1"), ("passive", "1"), ("", "0"),
                                          ("ACTIVE", "0")])
async def test_session_threads_stop_spinning_after_runs_when_openmp_waits_passively(
        onnx_embedder, cache_dir, monkeypatch, policy, stops):
    monkeypatch.setenv("OMP_WAIT_POLICY", policy)
    session = onnx_encoder.open_session(cache_dir / onnx_files(cache_dir)[0], 2)
    options = session.get_session_options()
    assert (options.intra_op_num_threads, options.inter_op_num_threads) == (2, 1)

    def entry(key: str, default: str) -> str:
        try:
            return options.get_session_config_entry(key)
        except RuntimeError:       # not set: ONNX Runtime's default
            return default

    assert entry("session.intra_op.allow_spinning", "1") == "1"     # always spin within a run
    assert entry("session.force_spinning_stop", "0") == stops


@pytest.mark.parametrize("spin,allow,stop", [("never", "0", "0"), ("within_run", "1", "1"),
                                             ("always", "1", "0")])
async def test_an_explicit_spin_mode_wins_over_the_openmp_policy(onnx_embedder, cache_dir, monkeypatch,
                                                                 spin, allow, stop):
    monkeypatch.setenv("OMP_WAIT_POLICY", "PASSIVE")
    options = onnx_encoder.open_session(cache_dir / onnx_files(cache_dir)[0], 1, spin).get_session_options()
    entries = {}
    for key, default in (("session.intra_op.allow_spinning", "1"), ("session.force_spinning_stop", "0")):
        try:
            entries[key] = options.get_session_config_entry(key)
        except RuntimeError:
            entries[key] = default
    assert (entries["session.intra_op.allow_spinning"], entries["session.force_spinning_stop"]) == (allow, stop)
    with pytest.raises(ValueError, match="spin must be one of"):
        onnx_encoder.open_session(cache_dir / onnx_files(cache_dir)[0], 1, "sometimes")


async def test_workers_and_batches_ahead_set_how_many_batches_the_model_takes():
    """`concurrent_workers` overrides threads // concurrent_threads; `ahead` batches queue at
    the workers on top (single mode: 1 worker + 1 ahead)."""
    assert LocalEmbedder(torch_threads=2, concurrent_threads=1, concurrent_workers=1).max_inflight == 1
    assert LocalEmbedder(torch_threads=2, concurrent_threads=1, concurrent_workers=1, ahead=1).max_inflight == 2
    assert LocalEmbedder(torch_threads=2, concurrent_threads=1, ahead=2).max_inflight == 4
    assert LocalEmbedder(torch_threads=2, concurrent_threads=0, concurrent_workers=3).max_inflight == 1  # no session
    assert LocalEmbedder(torch_threads=4, runtime="torch", ahead=1).max_inflight == 2
    with pytest.raises(ValueError, match="ahead"):
        LocalEmbedder(torch_threads=2, ahead=-1)
