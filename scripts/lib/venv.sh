# Sourced by scripts/serve, scripts/test, scripts/lint and scripts/lock: create or reuse .venv and
# install what is missing, from the hashed lock files.
# Usage: ensure_venv [extra]   (extra = "test" adds the test dependencies: requirements-test.lock)

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
      rm -rf "$venv/bin" "$venv/lib" "$venv/include" "$venv/pyvenv.cfg"
      # Debian ships venv separately; install it when we can (fresh machines run as root).
      if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
        echo "Running as root: installing Debian's python3-venv with apt-get (needed to create $venv) ..." >&2
        apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-venv >/dev/null
        "$py" -m venv "$venv"
      else
        echo "Cannot create a virtual environment: install python3-venv" >&2
        return 1
      fi
    fi
  fi
  local lock="requirements.lock"
  [ "$extra" = test ] && lock="requirements-test.lock"
  # reinstall only when pyproject.toml or the lock changed (the stamp records both)
  local stamp="$venv/.ragoverlay-${extra:-base}.sha256"
  local want
  want=$(cat pyproject.toml "$lock" 2>/dev/null | sha256sum | cut -d' ' -f1)
  if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
    # a lock made for other pins is refused with what differs, never installed quietly
    "$py" scripts/lib/lockcheck.py || return 1
    local total log="$venv/pip-install.log" status=0
    total=$(grep -cE '^[A-Za-z0-9]' "$lock")
    echo "Installing ragoverlay's dependencies into $venv: the $total packages of $lock" \
      "(a few minutes on a first start, most of it downloading; later starts skip this) ..." >&2
    local pip=("$venv/bin/python" -m pip install --disable-pip-version-check)
    # every package from the lock, each checked against its recorded hashes, a line per package
    # (scripts/lib/pip_progress.py; pip -q said nothing for minutes); pip's status, with or without
    # pipefail in the caller
    PYTHONUNBUFFERED=1 "${pip[@]}" --require-hashes -r "$lock" 2>&1 |
      "$py" scripts/lib/pip_progress.py "$lock" "$log" && status=${PIPESTATUS[0]} || status=1
    if [ "$status" != 0 ]; then
      echo "pip could not install $lock; the end of its output (all of it: $log):" >&2
      tail -n 25 "$log" >&2
      return 1
    fi
    # then the project itself, editable, with the locked setuptools (no build isolation, so nothing
    # unhashed is downloaded)
    echo "  installing ragoverlay itself ..." >&2
    "${pip[@]}" -q --no-deps --no-build-isolation -e .
    echo "$want" > "$stamp"
  fi
}
