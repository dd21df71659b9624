#!/usr/bin/env bash
# Idempotent bootstrap for a fresh Debian 12 host (root): system packages, .venv,
# python-qpid-proton built from its sdist against Cyrus SASL, Python requirements.
# A second run checks and changes nothing; each step says what it is doing.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON="${PYTHON:-python3}"
VENV=.venv
APT_PACKAGES=(libsasl2-dev sasl2-bin libsasl2-modules openssl libssl-dev pkg-config patch openjdk-17-jre-headless
              rabbitmq-server supervisor prometheus chromium chromium-driver mosquitto-clients postgresql
              debootstrap systemd-container iproute2 openssh-client dpkg-dev)  # last five: molecule's site scenario
STAMP="$VENV/.enmesh-requirements.sha256"

LOG="$VENV/setup.log"

step() { printf '==> %s\n' "$*"; }

# Run a noisy installer with its output in $LOG; show the log only when it fails.
quietly() {
  if ! "$@" >>"$LOG" 2>&1; then
    echo "error: '$*' failed; its output (from $LOG):" >&2
    tail -n 40 "$LOG" >&2
    exit 1
  fi
}

missing_apt_packages() {
  local pkg
  for pkg in "${APT_PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || echo "$pkg"
  done
}

step "system packages"
mapfile -t missing < <(missing_apt_packages)
if ((${#missing[@]})); then
  if [[ $(id -u) -ne 0 ]]; then
    echo "error: missing Debian packages: ${missing[*]}; run 'make setup' as root or install them" >&2
    exit 1
  fi
  echo "    installing: ${missing[*]}"
  apt-get update -qq || { echo "error: apt-get update failed: check the Debian package sources in /etc/apt" >&2; exit 1; }
  # rabbitmq-server's postinst would start a system-wide RabbitMQ (0.0.0.0:5672, epmd on
  # 4369). enmesh supervises its brokers itself, on loopback, so forbid service starts
  # during the install (Debian's policy-rc.d convention) unless the host already has a policy.
  guard=""
  if [[ ! -e /usr/sbin/policy-rc.d ]]; then
    printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d && chmod +x /usr/sbin/policy-rc.d
    guard=/usr/sbin/policy-rc.d
  fi
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  [[ -n $guard ]] && rm -f "$guard"
else
  echo "    all present"
fi

step "virtual environment $VENV"
if [[ ! -x $VENV/bin/python ]]; then
  "$PYTHON" -m venv "$VENV"
  quietly "$VENV/bin/pip" install --upgrade pip setuptools wheel
else
  echo "    exists"
fi

step "python-qpid-proton with Cyrus SASL"
# Built from its sdist with our patches (scripts/patches/, each says why) applied; the
# stamp records which patches the installed build has, so a new patch rebuilds it.
PROTON_VERSION=0.40.0
PROTON_STAMP="$VENV/.enmesh-proton.sha256"
proton_want=$(cat scripts/patches/python-qpid-proton-$PROTON_VERSION-*.patch | sha256sum | cut -d' ' -f1)
if "$VENV/bin/python" -c 'import proton, sys; sys.exit(0 if proton.SASL.extended() else 1)' 2>/dev/null \
   && [[ -f $PROTON_STAMP && $(cat "$PROTON_STAMP") == "$proton_want" ]]; then
  echo "    present, SASL.extended() is true, patches applied"
else
  echo "    building $PROTON_VERSION from the sdist with scripts/patches/ (about a minute)"
  build=$(mktemp -d)
  trap 'rm -rf "$build"' EXIT
  quietly "$VENV/bin/pip" download --no-cache-dir --no-deps --no-binary :all: -d "$build" \
    "python-qpid-proton==$PROTON_VERSION"
  tar -xzf "$build"/python_qpid_proton-$PROTON_VERSION.tar.gz -C "$build"
  for patch_file in scripts/patches/python-qpid-proton-$PROTON_VERSION-*.patch; do
    quietly patch -p1 -d "$build/python_qpid_proton-$PROTON_VERSION" -i "$PWD/$patch_file"
  done
  "$VENV/bin/pip" uninstall -q -y python-qpid-proton >/dev/null 2>&1 || true
  quietly "$VENV/bin/pip" install --no-cache-dir "$build/python_qpid_proton-$PROTON_VERSION"
  "$VENV/bin/python" -c 'import proton, sys; sys.exit(0 if proton.SASL.extended() else 1)' || {
    echo "error: python-qpid-proton was built without Cyrus SASL; is libsasl2-dev installed?" >&2; exit 1; }
  echo "$proton_want" > "$PROTON_STAMP"
fi

step "python requirements"
want=$(cat requirements.txt pyproject.toml | sha256sum | cut -d' ' -f1)
if [[ -f $STAMP && $(cat "$STAMP") == "$want" ]]; then
  echo "    up to date"
else
  echo "    installing requirements.txt and enmesh (editable)"
  quietly "$VENV/bin/pip" install -r requirements.txt -e .
  echo "$want" > "$STAMP"
fi
step "console assets (Chart.js from npm)"
# The console's charts are drawn by Chart.js, served by the console itself as a static file
# (its pages allow scripts from their own origin only). npm checks the tarball's integrity.
CHARTJS_VERSION=4.5.1
CHARTJS=enmesh/console/static/vendor/chart.umd.min.js
if [[ -f $CHARTJS && $(cat "$CHARTJS.version" 2>/dev/null) == "$CHARTJS_VERSION" ]]; then
  echo "    chart.js $CHARTJS_VERSION present"
else
  command -v npm >/dev/null || quietly apt-get install -y -qq --no-install-recommends npm
  pack=$(mktemp -d)
  quietly npm pack --silent --pack-destination "$pack" "chart.js@$CHARTJS_VERSION"
  mkdir -p "$(dirname "$CHARTJS")"
  tar -xzf "$pack/chart.js-$CHARTJS_VERSION.tgz" -C "$pack" package/dist/chart.umd.min.js package/LICENSE.md
  cp "$pack/package/dist/chart.umd.min.js" "$CHARTJS"
  cp "$pack/package/LICENSE.md" "$(dirname "$CHARTJS")/chart.js.LICENSE.md"
  echo "$CHARTJS_VERSION" > "$CHARTJS.version"
  rm -rf "$pack"
  echo "    chart.js $CHARTJS_VERSION installed"
fi
step "setup complete"
