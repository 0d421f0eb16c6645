# Nucleus RAG — the two set-up commands are `make run` and `make test`.
PY := .venv/bin/python
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1

.PHONY: run test test-fast lint-imports bootstrap protos check-protos down bench bench-quick reliability clean

bootstrap:
	@bash scripts/bootstrap.sh

## Command 1: bootstrap, start the stack on its embedded default, ingest the demo corpus, sample search.
run: bootstrap
	$(PY) -m cli.main demo

## Command 2: bootstrap and run the whole test suite (what .ci/run calls).
test: bootstrap
	$(PY) scripts/gen_protos.py --check
	$(PY) -m pytest -q -p no:cacheprovider

## Unit tests only (no service processes): the quick loop while editing.
test-fast: bootstrap
	$(PY) -m pytest -q -p no:cacheprovider tests/unit

## The layer contracts alone (also part of the unit tests).
lint-imports: bootstrap
	.venv/bin/lint-imports --no-cache

down:
	$(PY) -m cli.main down

protos: bootstrap
	$(PY) scripts/gen_protos.py

check-protos: bootstrap
	$(PY) scripts/gen_protos.py --check

## Benchmarks (see docs/BENCHMARKS.md)
bench: bootstrap
	$(PY) -m cli.main bench --dataset ../shared/data/scifact --tenant scifact

## The long reliability scenario (kills during ingest, write/read races, a crash loop, disk full,
## read-only data): minutes, not part of `make test`. See lab/reliability.py.
reliability: bootstrap
	$(PY) -m lab.reliability

clean:
	rm -rf .nucleus-data .bench-cache
