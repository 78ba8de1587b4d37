#!/usr/bin/env bash
# Installs the Claude Code CLI that provider/claudecode's tests drive, from
# the npm registry, pinned to the version the provider was verified
# against, into a cache directory; prints the path of its executable on
# stdout (everything else goes to stderr). Use:
#
#   export VIGIL_CLAUDE="$(bash .ci/claude.sh)"
#
# CLAUDE_CODE_VERSION overrides the pin; VIGIL_CACHE the cache directory
# (default ${XDG_CACHE_HOME:-$HOME/.cache}/vigil). A cached install of the
# right version is reused.
set -euo pipefail

VERSION="${CLAUDE_CODE_VERSION:-2.1.328}"
CACHE="${VIGIL_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/vigil}/claude-code-$VERSION"

# works PATH: the executable runs and reports the pinned version.
works() {
  [ -x "$1" ] && "$1" --version 2>/dev/null | grep -q "^$VERSION "
}

# find_cli prints the installed executable: the package's bin (the native
# binary once the postinstall script has copied it there), else the
# platform package's binary itself (when install scripts did not run).
find_cli() {
  local p
  for p in "$CACHE/node_modules/.bin/claude" "$CACHE"/node_modules/@anthropic-ai/claude-code-linux-*/claude; do
    if works "$p"; then
      echo "$p"
      return 0
    fi
  done
  return 1
}

if path=$(find_cli); then
  echo "$path"
  exit 0
fi

if ! command -v npm >/dev/null 2>&1; then
  echo "claude.sh: npm not found; installing Debian's npm" >&2
  sudo=""
  if [ "$(id -u)" -ne 0 ]; then
    sudo="sudo"
  fi
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -q >&2
  $sudo apt-get install -y -q --no-install-recommends npm >&2
fi

echo "claude.sh: installing @anthropic-ai/claude-code@$VERSION into $CACHE" >&2
mkdir -p "$CACHE"
npm install --prefix "$CACHE" --no-save --no-audit --no-fund --loglevel=error \
  "@anthropic-ai/claude-code@$VERSION" >&2

if path=$(find_cli); then
  "$path" --version >&2
  echo "$path"
  exit 0
fi
echo "claude.sh: no working claude $VERSION executable under $CACHE after npm install" >&2
exit 1
