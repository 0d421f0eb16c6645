"""Benchmark commands (see docs/BENCHMARKS.md).

The in-process baselines run with the OpenMP defaults a user's own process would have; the
service processes choose passive waiting themselves (services/_openmp.py)."""
