#!/usr/bin/env bash
# Installs the OpenAI Codex CLI that the Codex tests drive, from the npm
# registry, pinned to the version vigil was verified against, into a cache
# directory; prints the path of its executable on stdout (everything else
# goes to stderr). Use:
#
#   export VIGIL_CODEX="$(bash .ci/codex.sh)"
#
# CODEX_VERSION overrides the pin; VIGIL_CACHE the cache directory
# (default ${XDG_CACHE_HOME:-$HOME/.cache}/vigil). A cached install of the
# right version is reused.
set -euo pipefail

VERSION="${CODEX_VERSION:-0.169.0}"
CACHE="${VIGIL_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/vigil}/codex-$VERSION"

# works PATH: the executable runs and reports the pinned version
# ("codex-cli 0.169.0").
works() {
  [ -x "$1" ] && "$1" --version 2>/dev/null | grep -q "^codex-cli $VERSION\$"
}

# find_cli prints the installed executable: the native binary of the
# platform package (@openai/codex-linux-x64 etc., an npm alias of
# @openai/codex@$VERSION-linux-x64), which gets signals directly, else the
# package's bin, a node script that starts that binary.
find_cli() {
  local p
  for p in "$CACHE"/node_modules/@openai/codex-*/vendor/*/bin/codex "$CACHE/node_modules/.bin/codex"; do
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
  echo "codex.sh: npm not found; installing Debian's npm" >&2
  sudo=""
  if [ "$(id -u)" -ne 0 ]; then
    sudo="sudo"
  fi
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -q >&2
  $sudo apt-get install -y -q --no-install-recommends npm >&2
fi

echo "codex.sh: installing @openai/codex@$VERSION into $CACHE" >&2
mkdir -p "$CACHE"
npm install --prefix "$CACHE" --no-save --no-audit --no-fund --loglevel=error \
  "@openai/codex@$VERSION" >&2

if path=$(find_cli); then
  "$path" --version >&2
  echo "$path"
  exit 0
fi
echo "codex.sh: no working codex $VERSION executable under $CACHE after npm install" >&2
exit 1
