"""Benchmark commands (see docs/BENCHMARKS.md).

OMP_WAIT_POLICY=PASSIVE as in services/__init__.py, so in-process baselines and the services
run OpenMP the same way and a spinning baseline does not starve a service process."""
import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
