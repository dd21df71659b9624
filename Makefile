# enmesh: two commands on a fresh Debian 12 host (as root):
#   make up    set up, then bring up the local stack
#   make test  set up, then run lint, type checks and the test suite
SHELL := /bin/bash
VENV := .venv
PY := $(VENV)/bin/python
STACK ?= local
OUT ?= build/$(STACK)

.PHONY: setup up down status render test lint typecheck unit molecule molecule-site bench docs clean

setup:
	@bash scripts/setup.sh

render: setup
	@$(VENV)/bin/enmesh render --stack $(STACK) --out $(OUT)

up: setup
	@$(VENV)/bin/enmesh up --stack $(STACK)

down: setup
	@$(VENV)/bin/enmesh down --stack $(STACK)

status: setup
	@$(VENV)/bin/enmesh status --stack $(STACK)

lint: setup
	@echo "==> ruff ($$(date -u +%T))"
	@$(VENV)/bin/ruff check enmesh pulumi spark tests benchmarks scripts roles plugins
	@$(VENV)/bin/ruff format --check enmesh pulumi spark tests benchmarks scripts roles plugins
	@echo "==> ansible syntax ($$(date -u +%T))"
	@ANSIBLE_CONFIG=ansible.cfg $(VENV)/bin/ansible-playbook --syntax-check -i stacks/local.inventory.yml playbooks/*.yml >/dev/null
	@echo "==> ansible-lint (production profile; deliberate differences in .ansible-lint) ($$(date -u +%T))"
	@PATH="$(CURDIR)/$(VENV)/bin:$$PATH" ANSIBLE_CONFIG=ansible.cfg $(VENV)/bin/ansible-lint -q roles playbooks molecule

typecheck: setup
	@echo "==> mypy --strict enmesh pulumi/enmesh_k8s spark/enmesh_spark ($$(date -u +%T))"
	@$(VENV)/bin/mypy

unit: setup
	@echo "==> pytest ($$(date -u +%T))"
	@$(VENV)/bin/pytest -q --durations=15 $(PYTEST_ARGS)

# molecule's default scenario: the whole local stack, a second converge that must change
# nothing, the tests/e2e suite, then teardown (broker data purged).
# Then the keycloak scenario: the same stack with Keycloak, its database and enmesh-auth
# in the login path (stacks/keycloak.stack.yml), its own end-to-end checks, teardown.
molecule: setup
	@echo "==> molecule test (scenario default: the local stack) ($$(date -u +%T))"
	@PATH="$(CURDIR)/$(VENV)/bin:$$PATH" ANSIBLE_CONFIG=$(CURDIR)/ansible.cfg $(VENV)/bin/molecule test -s default
	@echo "==> molecule test (scenario keycloak: the local stack with Keycloak) ($$(date -u +%T))"
	@PATH="$(CURDIR)/$(VENV)/bin:$$PATH" ANSIBLE_CONFIG=$(CURDIR)/ansible.cfg $(VENV)/bin/molecule test -s keycloak

# molecule's site scenario: five systemd-nspawn hosts on a private bridge, site.yml over
# SSH, a second converge with no change, tests/sites (host faults included), destroy.
molecule-site: setup
	@echo "==> molecule test (scenario site: five hosts over SSH) ($$(date -u +%T))"
	@PATH="$(CURDIR)/$(VENV)/bin:$$PATH" ANSIBLE_CONFIG=$(CURDIR)/ansible.cfg $(VENV)/bin/molecule test -s site

# lint first, then the site scenario beside this host's checks (scripts/test_lanes.sh).
test: setup
	@MAKE="$(MAKE)" bash scripts/test_lanes.sh
	@echo "==> make test passed ($$(date -u +%T))"

# The documentation site (mkdocs.yml, docs/) into build/docs; a broken link fails.
docs: setup
	@NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict

bench: setup
	@$(PY) benchmarks/compile_scale.py
	@$(PY) benchmarks/router_throughput.py

clean:
	rm -rf build .pytest_cache .mypy_cache .ruff_cache
