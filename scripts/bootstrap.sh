#!/usr/bin/env bash
# Create .venv and install the project on a fresh machine (Python 3.11, pip, gcc), then make sure
# the Prometheus tools the observability kit is checked with are there (deploy/observability/).
# torch==2.13.0 goes in first: a CPU build of exactly that version is on disk; any other
# torch pulls gigabytes of CUDA packages. Idempotent: a stamp file skips the pip part already
# done; the tools part runs every time and does nothing when the binaries are already there.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3.11}
command -v "$PY" >/dev/null 2>&1 || PY=python3
VENV=${VENV:-.venv}
STAMP="$VENV/.bootstrap-$(sha1sum pyproject.toml | cut -c1-12)"

# --- 1. the virtualenv (skipped when the stamp for this pyproject.toml exists)
if [ ! -f "$STAMP" ]; then
  [ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
  "$VENV/bin/python" -m pip install --quiet --upgrade pip
  "$VENV/bin/python" -m pip install --quiet "torch==2.13.0"
  "$VENV/bin/python" -m pip install --quiet -e ".[dev]"
  touch "$STAMP"
  echo "bootstrap: $VENV ready"
fi

# --- 2. promtool, amtool, prometheus (Debian packages prometheus, prometheus-alertmanager):
# tests/unit/test_observability_kit.py checks the rules, alerts, scrape configs and the
# Alertmanager config with them. And chromium (Debian's package): tests/integration/test_console.py
# drives it with Playwright (never `playwright install`: no browser download). Installed with service starts forbidden (policy-rc.d exit 101),
# so no prometheus (:9090) or alertmanager (:9093) daemon is left running.
need_packages() {
  local pkgs=()
  command -v prometheus >/dev/null 2>&1 && command -v promtool >/dev/null 2>&1 || pkgs+=(prometheus)
  command -v amtool >/dev/null 2>&1 || pkgs+=(prometheus-alertmanager)
  command -v chromium >/dev/null 2>&1 || pkgs+=(chromium)
  echo "${pkgs[@]:-}"
}
PKGS=$(need_packages)
if [ -n "$PKGS" ]; then
  if ! command -v apt-get >/dev/null 2>&1; then
    echo "bootstrap: apt-get not found: install $PKGS (promtool, amtool, prometheus, chromium) by hand" >&2
    exit 1
  fi
  SUDO=()
  if [ "$(id -u)" != 0 ]; then
    if command -v sudo >/dev/null 2>&1; then
      SUDO=(sudo -n)
    else
      echo "bootstrap: not root and no sudo: install $PKGS (apt-get install $PKGS) as root" >&2
      exit 1
    fi
  fi
  POLICY=/usr/sbin/policy-rc.d
  MADE_POLICY=0
  if [ ! -e "$POLICY" ]; then
    # shellcheck disable=SC2016
    "${SUDO[@]}" sh -c 'printf "#!/bin/sh\nexit 101\n" > "$1" && chmod 755 "$1"' sh "$POLICY"
    MADE_POLICY=1
  fi
  cleanup_policy() { if [ "$MADE_POLICY" = 1 ]; then "${SUDO[@]}" rm -f "$POLICY"; fi; }
  trap cleanup_policy EXIT
  # shellcheck disable=SC2086
  install_pkgs() { "${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends $PKGS; }
  echo "bootstrap: installing $PKGS"
  if ! install_pkgs >/tmp/nucleus-bootstrap-apt.log 2>&1; then
    "${SUDO[@]}" apt-get update -q >>/tmp/nucleus-bootstrap-apt.log 2>&1 || true
    if ! install_pkgs >>/tmp/nucleus-bootstrap-apt.log 2>&1; then
      tail -20 /tmp/nucleus-bootstrap-apt.log >&2
      echo "bootstrap: could not install $PKGS (log /tmp/nucleus-bootstrap-apt.log)" >&2
      exit 1
    fi
  fi
  # Belt and braces: should a postinst have started a daemon anyway, stop it through its init script.
  for svc in prometheus prometheus-alertmanager; do
    if [ -x "/etc/init.d/$svc" ] && "/etc/init.d/$svc" status >/dev/null 2>&1; then
      "${SUDO[@]}" "/etc/init.d/$svc" stop >/dev/null 2>&1 || true
    fi
  done
  cleanup_policy
  trap - EXIT
  echo "bootstrap: $(promtool --version 2>&1 | head -1); $(amtool --version 2>&1 | head -1)"
fi
