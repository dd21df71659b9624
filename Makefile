# enmesh: two commands on a fresh Debian 12 host (as root):
#   make up    set up, then bring up the local stack
#   make test  set up, then run lint, type checks and the test suite
SHELL := /bin/bash
VENV := .venv
PY := $(VENV)/bin/python
STACK ?= local
OUT ?= build/$(STACK)

.PHONY: setup up down render test lint typecheck unit bench clean

setup:
	@bash scripts/setup.sh

render: setup
	@$(VENV)/bin/enmesh render --stack $(STACK) --out $(OUT)

up: render
	@echo "==> local stack rendered to $(OUT) (validated model, router configs, broker definitions, auth)"

lint: setup
	@echo "==> ruff"
	@$(VENV)/bin/ruff check enmesh tests benchmarks scripts
	@$(VENV)/bin/ruff format --check enmesh tests benchmarks scripts

typecheck: setup
	@echo "==> mypy --strict enmesh"
	@$(VENV)/bin/mypy

unit: setup
	@echo "==> pytest"
	@$(VENV)/bin/pytest -q

test: lint typecheck unit

bench: setup
	@$(PY) benchmarks/compile_scale.py
	@$(PY) benchmarks/router_throughput.py

clean:
	rm -rf build .pytest_cache .mypy_cache .ruff_cache
