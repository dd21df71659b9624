#!/usr/bin/env bash
# make test with the site scenario beside this host's other checks. One after another,
# the stages (setup, lint, types, pytest, the local-stack scenario, the site) took about
# two hours on this 2-core machine kind's slow days; most of the site's time is Ansible
# over SSH, broker boots and fault recovery, which leave the second core idle.
# Lint first, alone: ansible-lint and molecule both prepare Ansible's caches. Then the
# site scenario (hosts in network namespaces of their own; its verify ends with a rolling
# upgrade under traffic) in a second lane, from the start. Beside it: pytest's router
# checks first, at a higher CPU priority than the site (their timers, helloMaxAge 3 s,
# must not be starved: under the site's converge a paused-neighbour check saw releases),
# then types, the rest of pytest and the local-stack scenario. The local stack binds fixed
# ports on 127.0.0.1; pytest's brokers and routers take free ones and never those
# (tests/support/ports.py).
# Lines of the second lane are prefixed `site│ `; the exit status is lint's when it fails,
# else 1 if any stage failed.
set -uo pipefail
cd "$(dirname "$0")/.."
MAKE="${MAKE:-make}"
FIRST=(tests/router)

"$MAKE" --no-print-directory lint || exit $?

# In a process group of its own, so that an interrupted run stops the whole lane.
setsid bash -c '"$0" --no-print-directory molecule-site 2>&1 | sed -u "s/^/site│ /"
                site=${PIPESTATUS[0]}
                echo "==> site scenario exit $site"
                exit "$site"' "$MAKE" &
site=$!
trap 'kill -TERM -- "-$site" 2>/dev/null' EXIT
trap 'exit 130' INT TERM

nice -n -10 "$MAKE" --no-print-directory unit PYTEST_ARGS="${FIRST[*]}"
first=$?
"$MAKE" --no-print-directory typecheck
types=$?

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
stack=$?
wait "$site"
there=$?
echo "==> make test's lanes ended ($(date -u +%T)): router checks exit $first, types $types," \
    "the rest of pytest $second, the local-stack scenario $stack, the site scenario $there"
((first == 0 && types == 0 && second == 0 && stack == 0 && there == 0))
