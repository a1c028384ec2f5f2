# Sourced by scripts/serve and scripts/test: create or reuse .venv and install what is missing.
# Usage: ensure_venv [extra]   (extra = "test" adds the test dependencies)

find_python() {
  for candidate in "${PYTHON:-}" python3.11 python3.12 python3.13 python3; do
    [ -n "$candidate" ] || continue
    if command -v "$candidate" >/dev/null 2>&1 &&
       "$candidate" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else 1)' 2>/dev/null; then
      echo "$candidate"; return 0
    fi
  done
  echo "ragoverlay needs Python 3.11 or newer (set PYTHON=/path/to/python3.11)" >&2
  return 1
}

ensure_venv() {
  local extra="${1:-}"
  local py venv=".venv"
  py=$(find_python)
  if [ ! -x "$venv/bin/python" ]; then
    if ! "$py" -m venv "$venv" 2>/dev/null; then
      rm -rf "$venv"
      # Debian ships venv separately; install it when we can (fresh machines run as root).
      if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
        echo "Installing python3-venv with apt-get..." >&2
        apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-venv >/dev/null
        "$py" -m venv "$venv"
      else
        echo "Cannot create a virtual environment: install python3-venv" >&2
        return 1
      fi
    fi
  fi
  local spec="."
  [ -n "$extra" ] && spec=".[${extra}]"
  # reinstall only when pyproject.toml (the pinned dependency list) or the extra changed
  local stamp="$venv/.ragoverlay-${extra:-base}.sha256"
  local want
  want=$(sha256sum pyproject.toml | cut -d' ' -f1)
  if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
    echo "Installing ragoverlay dependencies into $venv ..." >&2
    "$venv/bin/python" -m pip install -q --disable-pip-version-check --upgrade pip >/dev/null
    "$venv/bin/python" -m pip install -q --disable-pip-version-check -e "$spec"
    echo "$want" > "$stamp"
  fi
}
