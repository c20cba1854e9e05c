#!/bin/sh
# cli_quantize_moe_gptaq.sh — GPTAQ and QEP on MoE layers (issue 13), end to
# end: the MoE architectures of tests/data/arch in GPTQ-packable shapes
# (make_quant_models.py, reference chroot with torch; Qwen2-MoE with its
# shared expert) are quantized by `lowbit quantize` with GPTQ, GPTAQ and
# GPTQ+QEP (4-bit g32, 16 x 128 calibration tokens, --moe-coverage all) and
# GPTAQ with --moe-coverage routed; the GPTAQ and GPTQ+QEP checkpoints are
# exported to GGUF with every linear direct (experts stacked into
# ffn_*_exps Q4_0), and `lowbit parity` checkpoint vs GGUF agrees on
# >= 99.9% of top-1 tokens. Each checkpoint's mean KL and top-1 against the
# dense model (`lowbit parity DENSE CKPT` on held-out text) is printed: the
# comparison of the methods (not asserted: on these random-weight models
# the methods' order is not a property to test; docs/quantize.md records
# the figures).
# QuaRot R1 (--rotate hadamard, with GPTQ and GPTAQ) on the MoE layouts and
# Phi-3: the rotated checkpoint (routers and Qwen2-MoE's shared_expert_gate
# written rotated) exports directly and keeps parity >= 99.9% with its GGUF;
# its KL against the dense (unrotated) model is printed beside the others.
set -eu
skip() { echo "SKIP: $*"; exit 77; }
SHARED=${LB_SHARED:-../shared}
REFENV="$SHARED/tools/refenv.sh"
: "${LOWBIT:?LOWBIT must point to the lowbit binary}"
sh "$REFENV" path >/dev/null 2>&1 || skip "reference chroot not built"
sh "$REFENV" run python3 -c "import torch, transformers" >/dev/null 2>&1 || skip "no torch in the reference chroot"
W=$(mktemp -d /tmp/lb_quantize_moe_gptaq.XXXXXX)
trap 'rm -rf "$W"' EXIT
sh "$REFENV" run python3 tests/data/arch/make_quant_models.py "$W/src" > "$W/make.log" 2>&1 \
  || { tail -20 "$W/make.log"; exit 1; }
TEXT="$SHARED/reference/ppl/texts/tinystories-valid-head30k.lf.txt"
head -c 20000 "$TEXT" > "$W/calib.txt"
# held-out text for the comparison with the dense model (after the calibration bytes)
tail -c +20001 "$TEXT" | head -c 16000 > "$W/text.txt"
kl_of() { sed -n 's/^KL(A||B): mean \([0-9.e+-]*\).*/\1/p' "$1"; }
top1_of() { sed -n 's/^top-1 agreement: \([0-9.]*\)%.*/\1/p' "$1"; }
for m in qwen3moe qwen2moe mixtral phi3; do
  S="$W/src/$m-random"
  vs="gptq gptaq qep gptaq-routed rot gptaq-rot"
  [ $m = phi3 ] && vs="gptq rot"
  for v in $vs; do
    case $v in
      gptq) args="--method gptq" ;;
      gptaq) args="--method gptaq" ;;
      qep) args="--method gptq --qep" ;;
      gptaq-routed) args="--method gptaq --moe-coverage routed" ;;
      rot) args="--method gptq --rotate hadamard" ;;
      gptaq-rot) args="--method gptaq --rotate hadamard" ;;
    esac
    Q="$W/$m-$v"
    # shellcheck disable=SC2086
    "$LOWBIT" quantize "$S" -o "$Q" --calib "$W/calib.txt" --nsamples 16 --seqlen 128 \
      --group-size 32 -q --json $args > "$W/q.json" 2> "$W/q.err" \
      || { cat "$W/q.err"; echo "$m $v: quantize failed"; exit 1; }
    # the method asked for
    case $v in
      gptq|rot) want='"method": "gptq"' ;;
      qep) want='"method": "gptq+qep"' ;;
      *) want='"method": "gptaq"' ;;
    esac
    grep -q "$want" "$W/q.json" || { head -c 600 "$W/q.json"; echo "$m $v: no $want in the report"; exit 1; }
    # every module of the plan quantized (the routers are not modules)
    python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); sys.exit(0 if r["modules"] == r["modules_quantized"] else 1)' "$W/q.json" \
      || { echo "$m $v: not every module quantized"; exit 1; }
    "$LOWBIT" parity "$S" "$Q" --text-file "$W/text.txt" --ctx 128 --greedy 0 > "$W/pd.log" 2>&1 \
      || { cat "$W/pd.log"; exit 1; }
    printf '%-9s %-13s vs dense: mean KL %s  top-1 %s%%\n' "$m" "$v" "$(kl_of "$W/pd.log")" "$(top1_of "$W/pd.log")"
    case $v in gptq|gptaq-routed) continue ;; esac
    E="$W/$m-$v-notok"; mkdir -p "$E"; cp "$Q"/*.json "$Q"/*.safetensors "$E/"; rm -f "$E/tokenizer.json"
    "$LOWBIT" export "$E" --mode direct -o "$W/$m-$v.gguf" > "$W/export.log" 2>&1 \
      || { cat "$W/export.log"; echo "$m $v: export failed"; exit 1; }
    grep -q " 0 mixed, 0 fallback" "$W/export.log" || { cat "$W/export.log"; echo "$m $v: not all direct"; exit 1; }
    if [ $m != phi3 ]; then
      "$LOWBIT" plan "$E" > "$W/plan.txt" 2>&1
      n=$(grep -c "_exps.weight .*direct *Q4_0 .*experts stacked" "$W/plan.txt" || true)
      [ "$n" -ge 3 ] || { grep exps "$W/plan.txt" || true; echo "$m $v: expert stacks not direct Q4_0"; exit 1; }
    fi
    "$LOWBIT" parity "$Q" "$W/$m-$v.gguf" --text-file "$W/text.txt" --ctx 128 --tokenizer "$S" \
      --greedy 0 > "$W/parity.log" 2>&1 || { cat "$W/parity.log"; exit 1; }
    top1=$(top1_of "$W/parity.log")
    awk -v a="$top1" -v m="$m $v" 'BEGIN { printf "%-23s checkpoint vs GGUF top-1 %s%%\n", m, a;
        exit (a != "" && a + 0 >= 99.9) ? 0 : 1 }' || { cat "$W/parity.log"; echo "$m $v: top-1 below 99.9%"; exit 1; }
  done
done
echo "cli_quantize_moe_gptaq: ok"
