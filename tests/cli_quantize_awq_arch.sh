#!/bin/sh
# cli_quantize_awq_arch.sh — AWQ on the issue-13 architectures end to end:
# the models of tests/data/arch/make_quant_models.py (GPTQ-packable shapes,
# tinystories-656k's tokenizer; reference chroot with torch) are quantized
# by `lowbit quantize --method awq` (4-bit g32 asym, 16 x 128 calibration
# tokens of text; MoE experts with --moe-coverage all, and routed for
# Qwen3-MoE and Qwen2-MoE), the AWQ GEMM checkpoint is exported to GGUF
# with every linear on the direct route (Q4_1; MoE experts stacked into
# ffn_*_exps), and `lowbit parity` checkpoint (loaded as the same Q4_1
# blocks, --gptq-mode fast) vs GGUF agrees on >= 99.9% of top-1 tokens.
# AWQ vs RTN (4-bit g32 asym): KL(dense || quantized) per token on text,
# printed for each architecture, must be lower for AWQ (measured AWQ/RTN
# 0.88..0.99 on these random-weight models; docs/quantize.md). awq-gptq runs on Mixtral and Qwen2-MoE (checkpoint
# loads, parity with its GGUF).
set -eu
skip() { echo "SKIP: $*"; exit 77; }
SHARED=${LB_SHARED:-../shared}
REFENV="$SHARED/tools/refenv.sh"
: "${LOWBIT:?LOWBIT must point to the lowbit binary}"
sh "$REFENV" path >/dev/null 2>&1 || skip "reference chroot not built"
sh "$REFENV" run python3 -c "import torch, transformers" >/dev/null 2>&1 || skip "no torch in the reference chroot"
W=$(mktemp -d /tmp/lb_quantize_awq_arch.XXXXXX)
trap 'rm -rf "$W"' EXIT
sh "$REFENV" run python3 tests/data/arch/make_quant_models.py "$W/src" > "$W/make.log" 2>&1 \
  || { tail -20 "$W/make.log"; exit 1; }
TEXT="$SHARED/reference/ppl/texts/tinystories-valid-head30k.lf.txt"
head -c 20000 "$TEXT" > "$W/calib.txt"
head -c 16000 "$TEXT" > "$W/text.txt"
# kl A B: mean KL(A || B) per token of `lowbit parity` on the text
kl() {
  "$LOWBIT" parity "$1" "$2" --text-file "$W/text.txt" --ctx 128 --tokenizer "$3" --gptq-mode f32 \
    --greedy 0 > "$W/kl.log" 2>&1 || { cat "$W/kl.log"; exit 1; }
  v=$(sed -n 's/^KL(A||B): mean \([0-9.e+-]*\),.*/\1/p' "$W/kl.log")
  [ -n "$v" ] || { cat "$W/kl.log"; echo "no KL in the parity output" >&2; exit 1; }
  echo "$v"
}
check() { # check NAME CKPT: direct export, parity >= 99.9%
  m=$1 Q=$2 S="$W/src/$1-random"
  E="$Q"
  case $m in
    phi3*|qwen*) # no tokenizer in the GGUF (llama.cpp 0.7.0 lacks these vocabularies)
      E="$Q-notok"; mkdir -p "$E"; cp "$Q"/*.json "$Q"/*.safetensors "$E/"; rm -f "$E/tokenizer.json" ;;
  esac
  "$LOWBIT" export "$E" --mode direct -o "$Q.gguf" > "$W/export.log" 2>&1 \
    || { cat "$W/export.log"; echo "$m: export failed"; exit 1; }
  grep -q " 0 mixed, 0 fallback" "$W/export.log" || { cat "$W/export.log"; echo "$m: not all direct"; exit 1; }
  case $m in
    *moe*|mixtral)
      "$LOWBIT" plan "$E" > "$W/plan.txt" 2>&1
      n=$(grep -c "_exps.weight .*direct *Q4_1 .*experts stacked" "$W/plan.txt" || true)
      [ "$n" -ge 3 ] || { grep exps "$W/plan.txt"; echo "$m: expert stacks not direct Q4_1"; exit 1; } ;;
  esac
  "$LOWBIT" parity "$Q" "$Q.gguf" --text-file "$W/text.txt" --ctx 128 --tokenizer "$S" \
    --gptq-mode fast --greedy 0 > "$W/parity.log" 2>&1 || { cat "$W/parity.log"; exit 1; }
  top1=$(sed -n 's/^top-1 agreement: \([0-9.]*\)%.*/\1/p' "$W/parity.log")
  awk -v a="$top1" -v m="$(basename "$Q")" 'BEGIN { printf "%-26s AWQ checkpoint vs direct GGUF top-1 %s%%\n", m, a;
      exit (a != "" && a + 0 >= 99.9) ? 0 : 1 }' || { cat "$W/parity.log"; echo "$m: top-1 below 99.9%"; exit 1; }
}
for m in gemma2 gemma3 phi3 phi3-longrope qwen3moe qwen2moe mixtral qwen3moe-mlponly qwen2moe-step2; do
  S="$W/src/$m-random" Q="$W/$m-awq"
  "$LOWBIT" quantize "$S" -o "$Q" --method awq --calib "$W/calib.txt" --nsamples 16 --seqlen 128 \
    --group-size 32 --report -q
  grep -q '"awq_ratio"' "$Q/quantize_report.json" || { echo "$m: no AWQ scaling group searched"; exit 1; }
  check "$m" "$Q"
  "$LOWBIT" quantize "$S" -o "$W/$m-rtn" --method rtn --asym --group-size 32 -q
  ka=$(kl "$S" "$Q" "$S"); kr=$(kl "$S" "$W/$m-rtn" "$S")
  awk -v a="$ka" -v r="$kr" -v m="$m" 'BEGIN { printf "%-18s 4-bit g32 asym KL(dense||q) per token: AWQ %.5f  RTN %.5f  (AWQ/RTN %.3f)\n", m, a, r, a / r;
      exit (a < r) ? 0 : 1 }' || { echo "$m: AWQ is not below RTN"; exit 1; }
  rm -rf "$W/$m-rtn"
done
for m in qwen3moe qwen2moe; do
  S="$W/src/$m-random" Q="$W/$m-awq-routed"
  "$LOWBIT" quantize "$S" -o "$Q" --method awq --moe-coverage routed --calib "$W/calib.txt" \
    --nsamples 16 --seqlen 128 --group-size 32 -q
  check "$m" "$Q"
done
for m in mixtral qwen2moe; do
  S="$W/src/$m-random" Q="$W/$m-awq-gptq"
  "$LOWBIT" quantize "$S" -o "$Q" --method awq-gptq --calib "$W/calib.txt" --nsamples 16 \
    --seqlen 128 --group-size 32 -q
  check "$m" "$Q"
done
echo "cli_quantize_awq_arch: ok"
