#!/bin/sh
# Configure and build one lowbit build tree: scripts/build.sh DIR [cmake args...]
set -eu
dir=$1; shift
cmake -S . -B "$dir" -G Ninja "$@" >/dev/null
ninja -C "$dir"
