#!/bin/sh
# eval_table.sh — lowbit eval scores of tinystories-656k, dense and
# quantized (RTN / GPTQ 4-bit and 3-bit g128 checkpoints, the lossless GGUF
# Q4_0 export of the GPTQ 4-bit checkpoint, llama.cpp's own Q4_0), on the
# TinyStories story-ending task and the 5 rolling documents
# (tests/data/eval), and KL divergence against the dense model. GGUF files are scored with the HF tokenizer.json
# (--tokenizer) unless the row says otherwise. Prints a Markdown table
# (docs/eval.md).
#   sh scripts/eval_table.sh [BUILD_DIR] [WORK_DIR]
set -eu
B=${1:-build}
W=${2:-/tmp/lowbit-eval-table}
LB=$B/lowbit
SHARED=${LB_SHARED:-../shared}
M=$SHARED/models/tinystories-656k
IDS=$SHARED/reference/gptq_model/calib_ids.i32
TASK=tests/data/eval/tinystories_ending.jsonl
DOCS=tests/data/eval/tinystories_docs.jsonl
mkdir -p "$W"
q_args() { name=$1; shift; "$LB" --quiet quantize "$M" -o "$W/$name" "$@" --force >/dev/null; }
q_args rtn4 --method rtn --bits 4 --group-size 128
q_args gptq4 --method gptq --bits 4 --group-size 128 --calib-ids "$IDS" --seqlen 128
q_args rtn3 --method rtn --bits 3 --group-size 128
q_args gptq3 --method gptq --bits 3 --group-size 128 --calib-ids "$IDS" --seqlen 128
"$LB" --quiet export "$W/gptq4" -o "$W/gptq4-q4_0.gguf" --mode auto >/dev/null
row() { # label model [eval options]
    lbl=$1; mdl=$2; shift 2
    j=$("$LB" --quiet --json eval "$mdl" --task $TASK -t 2 "$@")
    j2=$("$LB" --quiet --json eval "$mdl" --task $DOCS -t 2 "$@")
    python3 - "$lbl" "$j" "$j2" <<'PY'
import json, sys
a, b = json.loads(sys.argv[2]), json.loads(sys.argv[3])
print(f"| {sys.argv[1]} | {a['acc']:.4f} ± {a['acc_stderr']:.4f} | "
      f"{a['acc_norm']:.4f} ± {a['acc_norm_stderr']:.4f} | "
      f"{b['word_perplexity']:.3f} | {b['byte_perplexity']:.4f} | "
      f"{b['bits_per_byte']:.4f} |")
PY
}
echo "| model | acc | acc_norm | word_perplexity | byte_perplexity | bits_per_byte |"
echo "|---|---|---|---|---|---|"
row "dense F32" "$M"
row "RTN 4-bit g128" "$W/rtn4"
row "GPTQ 4-bit g128" "$W/gptq4"
row "GGUF Q4_0 (lossless export of GPTQ 4-bit)" "$W/gptq4-q4_0.gguf" --tokenizer "$M"
row "RTN 3-bit g128" "$W/rtn3"
row "GPTQ 3-bit g128" "$W/gptq3"
row "llama.cpp's Q4_0 GGUF (llama-quantize)" "$SHARED/models/tinystories-656k-gguf/ts656k-q4_0.gguf" --tokenizer "$M"
row "llama.cpp's F32 GGUF" "$SHARED/models/tinystories-656k-gguf/ts656k-f32.gguf" --tokenizer "$M"
row "GGUF Q4_0 export, its own GGUF tokenizer" "$W/gptq4-q4_0.gguf"

# KL divergence against the dense model (llama-perplexity's protocol, ctx
# 256, the TinyStories 30 KB head): base file from the dense model, each
# quantized model read against it (its tokens: no text needed)
TXT=$SHARED/reference/ppl/texts/tinystories-valid-head30k.lf.txt
"$LB" --quiet ppl "$M" --text-file "$TXT" --ctx 256 -t 2 --save-logits "$W/dense-base.bin" >/dev/null
echo
echo "| model | PPL(Q) | mean KLD | 99% KLD | same top p | RMS Δp |"
echo "|---|---|---|---|---|---|"
kl() {
    "$LB" --quiet --json ppl "$2" --kl-base "$W/dense-base.bin" -t 2 | python3 -c '
import json, sys
k = json.load(sys.stdin)["kl"]
print("| %s | %.4f | %.6f ± %.6f | %.4f | %.2f ± %.2f %% | %.3f %% |" % (sys.argv[1], k["ppl_q"],
      k["kld_mean"], k["kld_unc"], k["kld_p99"], 100 * k["same_top_p"], 100 * k["same_top_p_unc"],
      100 * k["dp_rms"]))' "$1"
}
kl "RTN 4-bit g128" "$W/rtn4"
kl "GPTQ 4-bit g128" "$W/gptq4"
kl "GGUF Q4_0 (lossless export of GPTQ 4-bit)" "$W/gptq4-q4_0.gguf"
kl "RTN 3-bit g128" "$W/rtn3"
kl "GPTQ 3-bit g128" "$W/gptq3"
kl "llama.cpp's Q4_0 GGUF (llama-quantize)" "$SHARED/models/tinystories-656k-gguf/ts656k-q4_0.gguf"
