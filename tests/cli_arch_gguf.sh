#!/bin/sh
# cli_arch_gguf.sh — llama.cpp 0.7.0's own conversions of the issue-13
# architectures (tests/data/arch, converted by its convert_hf_to_gguf.py in
# the reference chroot, ../shared/tools/refenv.sh; needs torch) load in
# lowbit and give the HF checkpoints' logits (test_arch with
# LB_ARCH_GGUF_DIR), and lowbit's own HF->GGUF export of them does too.
set -eu
skip() { echo "SKIP: $*"; exit 77; }
SHARED=${LB_SHARED:-../shared}
REFENV="$SHARED/tools/refenv.sh"
: "${LOWBIT:?LOWBIT must point to the lowbit binary}"
T=$(dirname "$LOWBIT")/test_arch
[ -x "$T" ] || skip "test_arch not built"
sh "$REFENV" path >/dev/null 2>&1 || skip "reference chroot not built"
sh "$REFENV" run python3 -c "import torch, gguf" >/dev/null 2>&1 || skip "no torch/gguf in the reference chroot"
W=$(mktemp -d /tmp/lb_arch_gguf.XXXXXX)
trap 'rm -rf "$W"' EXIT
sh "$REFENV" run python3 tests/data/arch/make_arch_gguf.py "$W" >"$W/convert.log" 2>&1 || { tail -20 "$W/convert.log"; exit 1; }
LB_ARCH_GGUF_DIR="$W" "$T"
