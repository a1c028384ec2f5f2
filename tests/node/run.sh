#!/usr/bin/env bash
# Runs the node --test suites for the LibreChat overlay (patches/librechat/fileSearch.js).
# Installs the suites' dependencies into tests/node/node_modules only (nothing global).
# Usage: bash tests/node/run.sh [--install-only]
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cd "$here"

if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
  echo "tests/node: node and npm are required (Node >= 20)" >&2
  exit 1
fi
major="$(node -p 'process.versions.node.split(".")[0]')"
if [ "$major" -lt 20 ]; then
  echo "tests/node: Node >= 20 is required, found $(node --version)" >&2
  exit 1
fi

# Reinstall only when the lock changed since the last install, so repeated runs stay offline.
stamp="node_modules/.ragoverlay-lock.sha256"
if [ -f package-lock.json ]; then
  want="$(sha256sum package-lock.json | cut -d' ' -f1)"
  if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
    npm ci --no-audit --no-fund --loglevel=error
    echo "$want" > "$stamp"
  fi
else
  npm install --no-audit --no-fund --loglevel=error
fi

if [ "${1:-}" = "--install-only" ]; then
  exit 0
fi

# Explicit file list: e2e_driver.js and support/ are helpers, not suites.
exec node --test ./*.test.js
