#!/usr/bin/env bash
# make test in two lanes at once. The site scenario (five hosts in network namespaces of
# their own, about half of the suite's time) runs beside this host's checks (types,
# pytest, then the local-stack scenarios); most of either lane's time is Ansible over SSH,
# broker boots and fault recovery, which leave this machine's second core idle.
# Lint runs first and alone: ansible-lint and molecule both prepare Ansible's caches.
# The local-stack scenarios stay in the lane after pytest: they bind fixed ports on
# 127.0.0.1, where pytest's brokers and routers take free ports of the same range.
# Lines of the site lane are prefixed `site│ `; the exit status is the worse lane's.
set -uo pipefail
cd "$(dirname "$0")/.."
MAKE="${MAKE:-make}"

"$MAKE" --no-print-directory lint || exit $?

# In a process group of its own, so that an interrupted run stops the whole lane.
setsid bash -c '"$0" --no-print-directory molecule-site 2>&1 | sed -u "s/^/site│ /"
                exit "${PIPESTATUS[0]}"' "$MAKE" &
site=$!
trap 'kill -TERM -- "-$site" 2>/dev/null' EXIT
trap 'exit 130' INT TERM

"$MAKE" --no-print-directory typecheck unit molecule
here=$?
wait "$site"
there=$?
echo "==> both lanes ended ($(date -u +%T)): this host's checks exit $here, the site's exit $there"
((here == 0 && there == 0))
