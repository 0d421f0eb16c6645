"""Experiments and measurements run from a checkout (`python -m lab.<name>`), not installed with
the wheel: fusion and calibration studies, RPC/ONNX/auth/completion/rerank costs, store backends
and index types, deployment modes, federation calls, ingest throughput, the reliability scenario
(`make reliability`). They may import the shipped packages (benchmarks, cli, services, ...);
nothing shipped imports them (the import contract "The product never imports the lab").

The in-process baselines run with the OpenMP defaults a user's own process would have; the
service processes choose passive waiting themselves (services/_openmp.py)."""
