"""Embedder configuration helpers."""
import pytest


@pytest.mark.parametrize("content,want", [("max 100000\n", None), ("200000 100000\n", 2),
                                          ("150000 100000", 2), ("50000 100000", 1),
                                          ("garbage", None)])
def test_cgroup_cpu_quota_is_read_as_whole_cpus(tmp_path, content, want):
    from services.llm_orchestration.embedder import _cgroup_cpu_quota

    path = tmp_path / "cpu.max"
    path.write_text(content)
    assert _cgroup_cpu_quota(str(path)) == want
    assert _cgroup_cpu_quota(str(tmp_path / "missing")) is None


def test_runtime_settings_come_from_the_environment(monkeypatch):
    import pydantic

    from services.llm_orchestration.embedder import LocalEmbedder
    from shared.settings import LlmOrchestrationSettings

    assert LlmOrchestrationSettings().local_runtime == "onnx"
    monkeypatch.setenv("NUCLEUS_LLM_LOCAL_RUNTIME", "torch")
    monkeypatch.setenv("NUCLEUS_LLM_ONNX_CACHE_DIR", "/var/cache/x")
    settings = LlmOrchestrationSettings()
    assert (settings.local_runtime, settings.onnx_cache_dir) == ("torch", "/var/cache/x")
    monkeypatch.setenv("NUCLEUS_LLM_LOCAL_RUNTIME", "tensorrt")
    with pytest.raises(pydantic.ValidationError, match="local_runtime"):
        LlmOrchestrationSettings()
    with pytest.raises(ValueError, match="runtime must be one of"):
        LocalEmbedder(runtime="tensorrt")


def test_default_onnx_cache_dir_follows_xdg_then_home(monkeypatch, tmp_path):
    from services.llm_orchestration.onnx_encoder import default_onnx_cache_dir

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert default_onnx_cache_dir() == tmp_path / "xdg" / "nucleus" / "onnx"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert default_onnx_cache_dir() == tmp_path / "home" / ".cache" / "nucleus" / "onnx"


def write_model_folder(root, modules, pooling):
    import json

    (root / "1_Pooling").mkdir(parents=True)
    (root / "modules.json").write_text(json.dumps(
        [{"idx": i, "name": str(i), "path": path, "type": f"sentence_transformers.models.{kind}"}
         for i, (kind, path) in enumerate(modules)]))
    (root / "1_Pooling" / "config.json").write_text(json.dumps(pooling))


MEAN_OLD_STYLE = {"pooling_mode_cls_token": False, "pooling_mode_mean_tokens": True,
                  "pooling_mode_max_tokens": False}
STACK = [("Transformer", ""), ("Pooling", "1_Pooling"), ("Normalize", "2_Normalize")]


@pytest.mark.parametrize("modules,pooling", [(STACK, MEAN_OLD_STYLE),
                                             (STACK[:2], {"pooling_mode": "mean"})])
def test_mean_pooling_stacks_are_supported(tmp_path, modules, pooling):
    from services.llm_orchestration.onnx_encoder import transformer_dir

    write_model_folder(tmp_path, modules, pooling)
    assert transformer_dir(str(tmp_path)) == tmp_path


@pytest.mark.parametrize("modules,pooling,reason", [
    (STACK, {**MEAN_OLD_STYLE, "pooling_mode_mean_tokens": False,
             "pooling_mode_cls_token": True}, "pooling mode 'cls'"),
    (STACK, {"pooling_mode": "lasttoken"}, "pooling mode 'lasttoken'"),
    (STACK + [("Dense", "3_Dense")], MEAN_OLD_STYLE, "module stack"),
])
def test_other_stacks_are_refused_with_the_reason(tmp_path, modules, pooling, reason):
    from services.llm_orchestration.onnx_encoder import OnnxUnusable, transformer_dir

    write_model_folder(tmp_path, modules, pooling)
    with pytest.raises(OnnxUnusable, match=reason):
        transformer_dir(str(tmp_path))
    with pytest.raises(OnnxUnusable, match="cannot read the module configuration"):
        transformer_dir(str(tmp_path / "missing"))
