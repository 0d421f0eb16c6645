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
