"""The soak benchmark's targets (benchmarks/soak.py `targets`) on made-up samples."""
from __future__ import annotations

from benchmarks.soak import targets


def rows(rss: list[float], fds: list[int] | None = None) -> list[dict]:
    return [{"t": 60.0 * (i + 1), "rss_mib": r, "fds": (fds or [40] * len(rss))[i], "threads": 30}
            for i, r in enumerate(rss)]


def verdicts(**kw) -> dict[str, bool | None]:
    args = {"rows": rows([500, 500, 500]), "searches": [], "errors": 0, "lost": 0, "resurrected": 0,
            "duration_s": 180.0, "settle_s": 100.0} | kw
    return {name.split(" ")[0] + (" " + name.split(" ")[1] if name.startswith("lost") else ""): passed
            for name, _, passed in targets(**args)}


def test_a_steady_run_passes_and_the_latency_target_waits_for_a_long_run():
    v = verdicts()
    assert v["RSS"] and v["fds"] and v["threads"] and v["errors"] and v["lost writes"] and v["resurrected"]
    assert v["p99"] is None


def test_memory_growth_over_five_percent_after_settling_fails():
    assert verdicts(rows=rows([400, 500, 520]))["RSS"] is True             # growth before settling is not judged
    assert verdicts(rows=rows([500, 500, 530]))["RSS"] is False


def test_file_descriptors_that_vary_by_more_than_five_fail():
    assert verdicts(rows=rows([500] * 3, fds=[30, 45, 40]))["fds"] is True           # 30: before settling
    assert verdicts(rows=rows([500] * 3, fds=[40, 46, 40]))["fds"] is False


def test_too_few_samples_after_settling_are_not_judged():
    assert verdicts(settle_s=600.0)["RSS"] is None


def test_p99_of_the_last_ten_minutes_is_held_to_1_3x_that_of_minutes_5_to_15():
    early = [(300.0 + i, 100.0, True, False) for i in range(600)]
    assert verdicts(searches=early + [(1200.0 + i, 125.0, True, False) for i in range(600)],
                    duration_s=1800.0)["p99"] is True
    assert verdicts(searches=early + [(1200.0 + i, 140.0, True, False) for i in range(600)],
                    duration_s=1800.0)["p99"] is False


def test_any_error_lost_write_or_resurrected_delete_fails():
    failed = [(10.0, 5.0, False, False)]
    assert verdicts(searches=failed)["errors"] is False and verdicts(errors=1)["errors"] is False
    assert verdicts(lost=1)["lost writes"] is False and verdicts(resurrected=1)["resurrected"] is False
