#!/bin/sh
# Install lowbit's build and test dependencies on Debian (run as root).
# Only packages that are missing are installed; safe to run repeatedly.
set -eu
PKGS="build-essential cmake ninja-build pkg-config git clang libclang-rt-dev
      libopenblas-dev liblapacke-dev libcjson-dev libpcre2-dev libutf8proc-dev
      libmicrohttpd-dev python3 debootstrap nodejs"
missing=""
for p in $PKGS; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
if [ -n "$missing" ]; then
  echo "install-deps: apt-get install$missing"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -q >/dev/null
  # shellcheck disable=SC2086
  apt-get install -y -q --no-install-recommends $missing >/dev/null
fi
# npm (lowbit serve's tests use the openai npm package): Debian's nodejs
# package may not ship it; the separate npm package does.
if ! command -v npm >/dev/null 2>&1; then
  echo "install-deps: apt-get install npm"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -q >/dev/null
  apt-get install -y -q --no-install-recommends npm >/dev/null
fi
