#!/bin/sh
# cli_arch_gguf.sh — llama.cpp 0.7.0's own conversions of the issue-13
# architectures (tests/data/arch, converted by its convert_hf_to_gguf.py in
# the reference chroot, ../shared/tools/refenv.sh; needs torch) load in
# lowbit and give the HF checkpoints' logits (test_arch with
# LB_ARCH_GGUF_DIR); llama.cpp loads and runs lowbit's Q8_0 exports of them
# (llama-bench), and on the same architectures with tinystories-656k's
# tokenizer (make_ppl_models.py) llama-perplexity and lowbit ppl agree within
# 0.5% on lowbit's F32 exports (gemma2, gemma3, Mixtral: Phi-3's vocabulary
# loader in llama.cpp needs a SentencePiece Phi-3 tokenizer, and the Qwen MoE
# converters need a Qwen tokenizer).
set -eu
skip() { echo "SKIP: $*"; exit 77; }
SHARED=${LB_SHARED:-../shared}
REFENV="$SHARED/tools/refenv.sh"
. "$(dirname "$0")/lib_refenv.sh"
: "${LOWBIT:?LOWBIT must point to the lowbit binary}"
T=$(dirname "$LOWBIT")/test_arch
[ -x "$T" ] || skip "test_arch not built"
sh "$REFENV" path >/dev/null 2>&1 || skip "reference chroot not built"
sh "$REFENV" run python3 -c "import torch, gguf" >/dev/null 2>&1 || skip "no torch/gguf in the reference chroot"
W=$(mktemp -d /tmp/lb_arch_gguf.XXXXXX)
trap 'rm -rf "$W"' EXIT
sh "$REFENV" run python3 tests/data/arch/make_arch_gguf.py "$W" >"$W/convert.log" 2>&1 || { tail -20 "$W/convert.log"; exit 1; }
LB_ARCH_GGUF_DIR="$W" "$T"

for m in gemma2 gemma3 phi3 phi3-longrope qwen3moe qwen2moe mixtral; do
  "$LOWBIT" export "tests/data/arch/$m-random" --qtype Q8_0 -o "$W/$m-q8.gguf" -q
  # llama.cpp's logger may lose its last lines at exit (lib_refenv.sh)
  ref_call "$W/bench.log" "$W/bench.log" "tg4" llama-bench -m "$W/$m-q8.gguf" -p 16 -n 4 -t 2 -r 1 \
    || { tail -5 "$W/bench.log"; echo "llama-bench $m: $ref_reason"; exit 1; }
  echo "llama-bench runs lowbit's $m Q8_0 export"
done

TEXT="$SHARED/reference/ppl/texts/tinystories-valid-head30k.lf.txt"
head -c 4000 "$TEXT" > "$W/text.txt"
sh "$REFENV" run python3 tests/data/arch/make_ppl_models.py "$W/ppl" > "$W/ppl.log" 2>&1 || { tail -20 "$W/ppl.log"; exit 1; }
for m in gemma2 gemma3 mixtral; do
  "$LOWBIT" export "$W/ppl/$m-random" --qtype F32 -o "$W/$m-ppl.gguf" -q
  a=$(ref_ppl "$W/lp.log" -m "$W/$m-ppl.gguf" -f "$W/text.txt" -c 128 -t 2) \
    || { tail -3 "$W/lp.log"; echo "llama-perplexity $m gave no final estimate"; exit 1; }
  b=$("$LOWBIT" ppl "$W/$m-ppl.gguf" --text-file "$W/text.txt" --ctx 128 -q 2>/dev/null | sed -n 's/.*PPL = \([0-9.]*\).*/\1/p')
  [ -n "$a" ] && [ -n "$b" ] || { echo "$m: no perplexity (llama.cpp '$a', lowbit '$b')"; exit 1; }
  awk -v a="$a" -v b="$b" -v f="$m" 'BEGIN { d = (b - a) / a; if (d < 0) d = -d;
      printf "%-8s llama.cpp %10.4f  lowbit %10.4f  diff %.4f%%\n", f, a, b, 100 * d;
      exit (d <= 0.005 ? 0 : 1) }' || { echo "$m: perplexities differ by more than 0.5%"; exit 1; }
done
echo "cli_arch_gguf: ok"
