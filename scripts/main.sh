#!/bin/sh
# lowbit's main job on the default model (../shared/models/tinystories-656k):
# install dependencies, build, then the whole pipeline (scripts/pipeline.sh):
# GPTQ quantization -> checkpoint -> GGUF export -> generation -> perplexity
# of the dense model, the GPTQ checkpoint and the GGUF, as a small table.
set -eu
cd "$(dirname "$0")/.."
sh scripts/install-deps.sh
sh scripts/build.sh build -DCMAKE_BUILD_TYPE=Release
MODEL=${MODEL:-../shared/models/tinystories-656k}
sh scripts/pipeline.sh "$MODEL"
