#!/bin/sh
# EoRA quality table (docs/quantize.md): GPTQ 4/3/2-bit g128 on tinystories-656k
# without and with EoRA adapters of rank 8/16/32; perplexity as the main job
# measures it (full protocol, ctx 256, the 30 KB TinyStories validation head,
# ids from `lowbit tokenize`), plus the GGUF route for 3-bit rank 16:
# dequantized F32 GGUF + GGUF adapter in lowbit and in llama-perplexity
# (llama protocol, refenv) when the refenv is there.
# Environment: LOWBIT (./build/lowbit), LB_SHARED (../shared), W (work dir).
set -eu
LB=${LOWBIT:-./build/lowbit}
SHARED=${LB_SHARED:-../shared}
M=$SHARED/models/tinystories-656k
IDS=$SHARED/reference/gptq_model/calib_ids.i32
TXT=$SHARED/reference/ppl/texts/tinystories-valid-head30k.lf.txt
W=${W:-$(mktemp -d "${TMPDIR:-/tmp}/lowbit-eora.XXXXXX")}
mkdir -p "$W"
"$LB" tokenize "$M" - --json < "$TXT" |
  python3 -c "import json,sys,struct; d=json.load(sys.stdin)['ids']; sys.stdout.buffer.write(struct.pack('<%di' % len(d), *d))" > "$W/eval.i32"
ppl() { "$LB" ppl "$@" --ids "$W/eval.i32" --protocol full --ctx 256 --json -q |
  python3 -c "import json,sys; print('%.4f' % json.load(sys.stdin)['ppl'])"; }
# weights of the quantized linears (bits/weight of the adapter are per such weight)
nq=$(python3 -c "
import json; c=json.load(open('$M/config.json')); d=c['hidden_size']; f=c['intermediate_size']; h=c['num_attention_heads']; kv=c.get('num_key_value_heads',h); hd=d//h
print(c['num_hidden_layers']*(d*h*hd*2 + 2*d*kv*hd + 3*d*f))")
pd=$(ppl "$M")
# base bits/weight: lowbit quantize's (qweight + qzeros + scales + g_idx) / weights
echo "| bits | EoRA rank | adapter bits/weight (F32 / as F16) | total bits/weight (F16 adapter) | perplexity | gap to dense closed |"
echo "|---|---|---|---|---|---|"
echo "| dense F32 | - | - | 32 | $pd | - |"
for b in 4 3 2; do
  bb=$("$LB" --json quantize "$M" -o "$W/g$b" --method gptq --bits $b --group-size 128 --calib-ids "$IDS" --seqlen 128 --force |
    python3 -c "import json,sys; print('%.3f' % json.load(sys.stdin)['bits_per_weight'])")
  p0=$(ppl "$W/g$b")
  echo "| $b | - | - | $bb | $p0 | - |"
  for r in 8 16 32; do
    "$LB" --quiet eora "$M" "$W/g$b" -o "$W/e${b}r$r" --rank $r --calib-ids "$IDS" --seqlen 128
    pr=$(ppl "$W/g$b" --lora "$W/e${b}r$r")
    np=$("$LB" --json eora "$M" "$W/g$b" -o "$W/e${b}r$r" --rank $r --calib-ids "$IDS" --seqlen 128 | python3 -c "import json,sys; print(json.load(sys.stdin)['params'])")
    python3 -c "
pd,p0,pr,np,nq=$pd,$p0,$pr,$np,$nq
print('| $b | $r | %.2f / %.2f | %.2f | $pr | %.1f%% |' % (np*32/nq, np*16/nq, $bb + np*16/nq, 100*(p0-pr)/(p0-pd)))"
  done
done
# GGUF route, 3-bit rank 16 (llama-perplexity protocol: BOS per chunk, second half scored)
"$LB" --quiet export "$W/g3" -o "$W/g3-f32.gguf" --mode dequantize --qtype F32 >/dev/null
"$LB" --quiet export "$W/e3r16" -o "$W/e3r16.gguf" --base "$W/g3" >/dev/null
lp() { "$LB" ppl "$@" --text-file "$TXT" --ctx 256 --json -q | python3 -c "import json,sys; print('%.4f' % json.load(sys.stdin)['ppl'])"; }
echo
echo "GGUF route (llama protocol, ctx 256, text file):"
echo "lowbit: GGUF $(lp "$W/g3-f32.gguf")  GGUF + GGUF adapter $(lp "$W/g3-f32.gguf" --lora "$W/e3r16.gguf")  checkpoint + PEFT adapter $(lp "$W/g3" --lora "$W/e3r16")"
if [ -n "${REFENV:-}" ]; then
  for l in "" "--lora $W/e3r16.gguf"; do
    r=""
    for try in 1 2 3 4; do # llama.cpp 0.7.0's tools sometimes lose their output
      sh "$REFENV" run llama-perplexity -m "$W/g3-f32.gguf" -f "$TXT" -c 256 -b 256 -t 2 $l > "$W/lp.log" 2>&1 || true
      r=$(grep -o 'Final estimate: PPL = [0-9.]*' "$W/lp.log" || true)
      [ -n "$r" ] && break
      echo "(llama-perplexity gave no estimate, try $try)" >&2
    done
    echo "llama-perplexity ${l:-(no adapter)}: ${r:-no result, see $W/lp.log}"
  done
fi
