"""The cost of a hostile folder: how long the conversion worker takes to refuse zip bombs
(DOCX, XLSX, PPTX), a PDF bomb, a billion-laughs DOCX, deeply nested HTML and the front-matter
and binary-text cases, and the peak memory it reaches — against the same run's baseline, the
good files of benchmarks/sample_files.py converted by the same worker.

    .venv/bin/python -m lab.ingest_hostile [--inflate-mb 300] [--rounds 3]

The bombs inflate to `--inflate-mb` MB (default 300: past the default entry limit of 256 MB and
PDF stream limit of 64 MB); limits are the defaults (or NUCLEUS_INGEST_*). Each round converts
the good folder, then the hostile one, in one worker (shared/documents/worker.py), as
`nucleus ingest` does. Prints a table (seconds per round, per file, peak resident memory of the
worker and of this process) and one JSON line with every figure.
"""
from __future__ import annotations

import argparse
import json
import resource
import statistics
import tempfile
import time
from pathlib import Path


def _convert_all(worker, paths: list[Path]) -> tuple[float, dict[str, str]]:
    from shared.documents import Rejected

    outcomes: dict[str, str] = {}
    started = time.perf_counter()
    for path in paths:
        try:
            worker.load(path)
            outcomes[path.name] = "ingested"
        except Rejected as err:
            outcomes[path.name] = err.reason
    return time.perf_counter() - started, outcomes


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m lab.ingest_hostile", description=__doc__.split("\n\n")[0])
    parser.add_argument("--inflate-mb", type=int, default=300, help="what each bomb inflates to (default 300)")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)

    from benchmarks.hostile_files import write_hostile_folder
    from benchmarks.sample_files import write_good_folder
    from shared.documents import iter_files
    from shared.documents.limits import Limits
    from shared.documents.worker import ConversionWorker

    limits = Limits.from_env()
    with tempfile.TemporaryDirectory(prefix="nucleus-hostile-bench-") as tmp:
        good_dir, bad_dir = Path(tmp) / "good", Path(tmp) / "hostile"
        write_good_folder(good_dir)
        t = time.perf_counter()
        expected = write_hostile_folder(bad_dir, inflate_mb=args.inflate_mb)
        write_s = time.perf_counter() - t
        good, bad = list(iter_files(good_dir)), list(iter_files(bad_dir))
        disk_kib = sum(p.stat().st_size for p in bad) / 1024
        good_s, bad_s = [], []
        with ConversionWorker(limits) as worker:
            worker.load(good[0])                             # start the worker outside the timings
            for _ in range(args.rounds):
                seconds, good_out = _convert_all(worker, good)
                good_s.append(seconds)
                seconds, bad_out = _convert_all(worker, bad)
                bad_s.append(seconds)
    refused = sum(1 for name, (reason, _) in expected.items() if bad_out.get(name) == reason)
    worker_mib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    self_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    figures = {
        "inflate_mb": args.inflate_mb, "hostile_files": len(bad), "hostile_on_disk_kib": round(disk_kib),
        "refused_as_expected": refused, "good_files": len(good),
        "good_ingested": sum(1 for v in good_out.values() if v == "ingested"),
        "hostile_s_median": round(statistics.median(bad_s), 3), "good_s_median": round(statistics.median(good_s), 3),
        "hostile_ms_per_file": round(1000 * statistics.median(bad_s) / len(bad), 1),
        "good_ms_per_file": round(1000 * statistics.median(good_s) / len(good), 1),
        "worker_peak_rss_mib": round(worker_mib), "bench_peak_rss_mib": round(self_mib),
        "write_s": round(write_s, 2), "limits": {k: v for k, v in limits.env().items()},
    }
    figures["hostile_vs_good_per_file"] = round(
        figures["hostile_ms_per_file"] / max(figures["good_ms_per_file"], 1e-9), 2)
    print(f"hostile folder: {len(bad)} files, {disk_kib:.0f} KiB on disk, bombs inflating to {args.inflate_mb} MB; "
          f"{refused}/{len(expected)} refused with the expected reason")
    print(f"  hostile  {figures['hostile_s_median']:.3f} s a round ({figures['hostile_ms_per_file']} ms a file)")
    print(f"  good     {figures['good_s_median']:.3f} s a round ({figures['good_ms_per_file']} ms a file), "
          f"{figures['good_ingested']}/{len(good)} converted — baseline")
    print(f"  ratio    {figures['hostile_vs_good_per_file']}x the time per file of a good one")
    print(f"  peak resident memory: worker {figures['worker_peak_rss_mib']} MiB, this process "
          f"{figures['bench_peak_rss_mib']} MiB")
    print(json.dumps(figures))
    return 0 if refused == len(expected) else 1


if __name__ == "__main__":
    raise SystemExit(main())
