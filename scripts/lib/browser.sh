# Sourced by scripts/test: make sure the console's browser tests have Debian's headless Chromium and
# its driver (tests/e2e/test_console_browser.py). Installed with apt-get when missing and this runs
# as root; otherwise the tests skip and say what to install. Never fails the run itself.
ensure_browser() {
  if command -v chromedriver >/dev/null 2>&1 && { command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1; }; then
    return 0
  fi
  if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
    echo "scripts/test: no chromium here; the console's browser tests will skip (apt-get install chromium chromium-driver)" >&2
    return 0
  fi
  echo "scripts/test: installing chromium and chromium-driver for the console's browser tests (apt-get, once) ..." >&2
  if ! { apt-get update -qq >/dev/null 2>&1 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver >/dev/null 2>&1; }; then
    echo "scripts/test: apt-get could not install chromium; the console's browser tests will skip" >&2
  fi
  return 0
}
