# enmesh: two commands on a fresh Debian 12 host (as root):
#   make up    set up, then bring up the local stack
#   make test  set up, then run lint, type checks and the test suite
SHELL := /bin/bash
VENV := .venv
PY := $(VENV)/bin/python
STACK ?= local
# A stage's heading with its start time (CI's log then shows where the time went).
stage = echo "==> $(1) ($$(date -u +%T))"
OUT ?= build/$(STACK)

.PHONY: setup up down status render test lint typecheck unit molecule molecule-keycloak molecule-site bench docs clean

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
	@$(call stage,ruff)
	@$(VENV)/bin/ruff check enmesh pulumi spark tests benchmarks scripts roles plugins
	@$(VENV)/bin/ruff format --check enmesh pulumi spark tests benchmarks scripts roles plugins
	@$(call stage,ansible syntax)
	@ANSIBLE_CONFIG=ansible.cfg $(VENV)/bin/ansible-playbook --syntax-check -i stacks/local.inventory.yml playbooks/*.yml >/dev/null
	@$(call stage,ansible-lint (production profile; deliberate differences in .ansible-lint))
	@PATH="$(CURDIR)/$(VENV)/bin:$$PATH" ANSIBLE_CONFIG=ansible.cfg $(VENV)/bin/ansible-lint -q roles playbooks molecule

typecheck: setup
	@$(call stage,mypy --strict enmesh pulumi/enmesh_k8s spark/enmesh_spark)
	@$(VENV)/bin/mypy

unit: setup
	@$(call stage,pytest)
	@$(VENV)/bin/pytest -q --durations=15 $(PYTEST_ARGS)

# molecule's default scenario: the whole local stack, a second converge that must change
# nothing, the tests/e2e suite, then teardown (broker data purged).
molecule: setup
	@$(call stage,molecule test (scenario default: the local stack))
	@PATH="$(CURDIR)/$(VENV)/bin:$$PATH" ANSIBLE_CONFIG=$(CURDIR)/ansible.cfg $(VENV)/bin/molecule test -s default

# The keycloak scenario: the same stack with Keycloak, its database and enmesh-auth in
# the login path (stacks/keycloak.stack.yml), its own end-to-end checks, teardown. Not in
# make test: with it, make test no longer fit CI's 90 minutes on a 2-core machine.
molecule-keycloak: setup
	@$(call stage,molecule test (scenario keycloak: the local stack with Keycloak))
	@PATH="$(CURDIR)/$(VENV)/bin:$$PATH" ANSIBLE_CONFIG=$(CURDIR)/ansible.cfg $(VENV)/bin/molecule test -s keycloak

# molecule's site scenario: five systemd-nspawn hosts on a private bridge, site.yml over
# SSH, a second converge with no change, tests/sites (host faults included), destroy.
molecule-site: setup
	@$(call stage,molecule test (scenario site: five hosts over SSH))
	@PATH="$(CURDIR)/$(VENV)/bin:$$PATH" ANSIBLE_CONFIG=$(CURDIR)/ansible.cfg $(VENV)/bin/molecule test -s site

# The stages above, the site scenario beside most of them (scripts/test_lanes.sh says how).
test: setup
	@MAKE="$(MAKE)" bash scripts/test_lanes.sh
	@$(call stage,make test passed)

# The documentation site (mkdocs.yml, docs/) into build/docs; a broken link fails.
docs: setup
	@NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict

bench: setup
	@$(PY) benchmarks/compile_scale.py
	@$(PY) benchmarks/router_throughput.py

clean:
	rm -rf build .pytest_cache .mypy_cache .ruff_cache
