#!/usr/bin/env bash
# make test with the site scenario beside this host's other checks. Alone, the stages
# (setup, lint, types, pytest, the local-stack scenarios, the site) took about two hours
# on this 2-core machine kind's slow days; most of the site's time is Ansible over SSH,
# broker boots and fault recovery, which leave the second core idle.
# Alone first: lint (ansible-lint and molecule both prepare Ansible's caches), types, and
# pytest's unit and router checks (the router's timers, helloMaxAge 3 s, must not be
# starved: under the site's converge a paused-neighbour check saw releases).
# Then the site scenario (hosts in network namespaces of their own) in a second lane,
# beside the rest of pytest and then the local-stack scenarios, which stay after pytest:
# they bind fixed ports on 127.0.0.1, where pytest's brokers and routers take free ones.
# Lines of the site lane are prefixed `site│ `; the exit status is the worst stage's.
set -uo pipefail
cd "$(dirname "$0")/.."
MAKE="${MAKE:-make}"
FIRST=(tests/unit tests/router)

"$MAKE" --no-print-directory lint typecheck || exit $?
"$MAKE" --no-print-directory unit PYTEST_ARGS="${FIRST[*]}"
first=$?

# In a process group of its own, so that an interrupted run stops the whole lane.
setsid bash -c '"$0" --no-print-directory molecule-site 2>&1 | sed -u "s/^/site│ /"
                exit "${PIPESTATUS[0]}"' "$MAKE" &
site=$!
trap 'kill -TERM -- "-$site" 2>/dev/null' EXIT
trap 'exit 130' INT TERM

# The rest of pyproject.toml's testpaths (pytest's --ignore does not apply to them).
rest=$(.venv/bin/python - "${FIRST[@]}" <<'PY'
import sys, tomllib
with open("pyproject.toml", "rb") as f:
    paths = tomllib.load(f)["tool"]["pytest"]["ini_options"]["testpaths"]
print(" ".join(p for p in paths if p not in sys.argv[1:]))
PY
)
"$MAKE" --no-print-directory unit PYTEST_ARGS="$rest"
second=$?
"$MAKE" --no-print-directory molecule
scenarios=$?
wait "$site"
there=$?
echo "==> make test's lanes ended ($(date -u +%T)): pytest exit $first and $second," \
    "local-stack scenarios $scenarios, site $there"
((first == 0 && second == 0 && scenarios == 0 && there == 0))
