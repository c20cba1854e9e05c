#!/bin/sh
# lowbit's main job on the default model (../shared/models/tinystories-656k):
# install dependencies, build, and generate text greedily.
set -eu
cd "$(dirname "$0")/.."
sh scripts/install-deps.sh
sh scripts/build.sh build -DCMAKE_BUILD_TYPE=Release
MODEL=${MODEL:-../shared/models/tinystories-656k}
./build/lowbit run "$MODEL" -p "Once upon a time" -n 32
