#!/usr/bin/env bash
# Installs the Claude Agent SDK (TypeScript, @anthropic-ai/claude-agent-sdk)
# that cmd/vigil's stream-json tests drive vigil with, from the npm
# registry, pinned, into a cache directory; prints the install directory
# (the one holding node_modules) on stdout, everything else goes to
# stderr. Use:
#
#   export VIGIL_AGENT_SDK="$(bash .ci/agent-sdk.sh)"
#
# AGENT_SDK_VERSION overrides the pin; VIGIL_CACHE the cache directory
# (default ${XDG_CACHE_HOME:-$HOME/.cache}/vigil). A cached install of the
# right version is reused. Node is Debian's (/usr/bin/node), installed with
# npm when missing.
set -euo pipefail

VERSION="${AGENT_SDK_VERSION:-0.3.334}"
CACHE="${VIGIL_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/vigil}/agent-sdk-$VERSION"
PKG="$CACHE/node_modules/@anthropic-ai/claude-agent-sdk/package.json"

# installed: the cached package is there and is the pinned version.
installed() {
  [ -f "$PKG" ] && command -v node >/dev/null 2>&1 &&
    [ "$(node -p "require(process.argv[1]).version" "$PKG" 2>/dev/null)" = "$VERSION" ]
}

if installed; then
  echo "$CACHE"
  exit 0
fi

if ! command -v npm >/dev/null 2>&1 || ! command -v node >/dev/null 2>&1; then
  echo "agent-sdk.sh: node/npm not found; installing Debian's nodejs and npm" >&2
  sudo=""
  if [ "$(id -u)" -ne 0 ]; then
    sudo="sudo"
  fi
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -q >&2
  $sudo apt-get install -y -q --no-install-recommends nodejs npm >&2
fi

echo "agent-sdk.sh: installing @anthropic-ai/claude-agent-sdk@$VERSION into $CACHE" >&2
mkdir -p "$CACHE"
# --ignore-scripts: the SDK's optional native CLI packages are not needed;
# the tests point pathToClaudeCodeExecutable at the executable under test.
npm install --prefix "$CACHE" --no-save --no-audit --no-fund --loglevel=error \
  --ignore-scripts --omit=optional "@anthropic-ai/claude-agent-sdk@$VERSION" >&2

if installed; then
  echo "$CACHE"
  exit 0
fi
echo "agent-sdk.sh: no @anthropic-ai/claude-agent-sdk $VERSION under $CACHE after npm install" >&2
exit 1
