#!/usr/bin/env bash
# Installs Debian's chromium when it is missing and prints its path. The
# browser test (server/ui_test.go) finds it at /usr/bin/chromium or in
# $VIGIL_CHROMIUM.
set -euo pipefail

find_chromium() {
  if [ -n "${VIGIL_CHROMIUM:-}" ] && [ -x "$VIGIL_CHROMIUM" ]; then
    echo "$VIGIL_CHROMIUM"
    return 0
  fi
  for p in /usr/bin/chromium /usr/bin/chromium-browser; do
    if [ -x "$p" ]; then
      echo "$p"
      return 0
    fi
  done
  return 1
}

if path=$(find_chromium); then
  echo "$path"
  exit 0
fi

sudo=""
if [ "$(id -u)" -ne 0 ]; then
  sudo="sudo"
fi
echo "chromium not found; installing Debian's chromium" >&2
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -q >&2
$sudo apt-get install -y -q --no-install-recommends chromium fonts-dejavu-core >&2

if path=$(find_chromium); then
  "$path" --version >&2 || true
  echo "$path"
  exit 0
fi
echo "chromium is still missing after apt-get install" >&2
exit 1
