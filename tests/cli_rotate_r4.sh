#!/bin/sh
# cli_rotate_r4 — a rotated checkpoint with the online Hadamard on
# down_proj's input (`--rotate hadamard-r4`, QuaRot R1 + R4) of
# tinystories-656k (ff 384 = 12 * 32: Paley I q = 11 (x) Sylvester 32):
#   - the checkpoint lists the transform in meta.rotation.online and runs in
#     lowbit (perplexity within a bound; the same with LB_FORCE_REF=1 and
#     LB_KERNELS=avx2, which change the Hadamard kernel, within 0.01%);
#   - `lowbit plan` puts each ffn_down on the fallback route naming the
#     online Hadamard, every other linear on the direct route; --mode direct
#     is refused naming down_proj; the auto export runs in lowbit within 3%
#     of the checkpoint's perplexity (the folded-back down_proj is
#     re-quantized by RTN);
#   - tampered metadata is refused with the key named: unknown rotation
#     kind, unknown online kind and module, a seed that is not a decimal
#     integer, an online order that does not match intermediate_size, an
#     online m that is not the one the order implies, more than one online
#     entry; and a checkpoint without the online entry (same weights) is a
#     different model (the transform is not optional).
set -eu
: "${LOWBIT:?set LOWBIT to the lowbit binary}"
SHARED=${LB_SHARED:-../shared}
M="$SHARED/models/tinystories-656k"
CAL="$SHARED/reference/gptq_model/calib_ids.i32"
TEXT="$SHARED/reference/ppl/texts/tinystories-valid-head30k.lf.txt"
[ -d "$M" ] && [ -f "$CAL" ] && [ -f "$TEXT" ] || { echo "SKIPPED: shared data missing"; exit 77; }
T=$(mktemp -d "${TMPDIR:-/tmp}/cli_rotate_r4.XXXXXX")
trap 'rm -rf "$T"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
ppl() { p=$1; shift; "$LOWBIT" ppl "$p" --text-file "$TEXT" --ctx 256 --protocol full -t 2 -q "$@" 2>/dev/null |
          sed -n 's/.*PPL = \([0-9.]*\).*/\1/p'; }

"$LOWBIT" --quiet quantize "$M" -o "$T/r4" --method gptaq --rotate hadamard-r4 --asym \
  --calib-ids "$CAL" --seqlen 128 --nsamples 32 -t 2 >/dev/null || fail "quantize"
grep -q '"module":[[:space:]]*"mlp.down_proj"' "$T/r4/config.json" || fail "no online entry"
grep -q '"construction":[[:space:]]*"paley1"' "$T/r4/config.json" || fail "construction"

a=$(ppl "$T/r4")
b=$(LB_FORCE_REF=1 ppl "$T/r4")
c=$(LB_KERNELS=avx2 ppl "$T/r4")
[ -n "$a" ] && [ -n "$b" ] && [ -n "$c" ] || fail "no perplexity ('$a' '$b' '$c')"
awk -v a="$a" -v b="$b" -v c="$c" 'BEGIN {
    printf "R1+R4 GPTAQ 4-bit g128 (32 calibration samples): %.4f (ref kernels %.4f, avx2 %.4f)\n", a, b, c;
    d = (a - b) / a; if (d < 0) d = -d; e = (a - c) / a; if (e < 0) e = -e;
    exit (a < 42.5 && d < 1e-4 && e < 1e-4 ? 0 : 1) }' || fail "perplexity out of bounds"

"$LOWBIT" plan "$T/r4" > "$T/plan.txt" 2>&1 || fail "plan: $(tail -2 "$T/plan.txt")"
nd=$(grep -c '^blk\.[0-9]*\.ffn_down\.weight .* fallback .*online Hadamard' "$T/plan.txt" || true)
nx=$(grep -c '^blk\..* direct ' "$T/plan.txt" || true)
[ "$nd" = 2 ] && [ "$nx" = 12 ] || { cat "$T/plan.txt"; fail "plan: $nd ffn_down fallback, $nx direct (want 2, 12)"; }
if "$LOWBIT" --quiet export "$T/r4" -o "$T/d.gguf" --mode direct 2> "$T/err"; then
  fail "--mode direct accepted"
fi
grep -q "down_proj.*online Hadamard" "$T/err" || fail "direct refusal: $(cat "$T/err")"
[ ! -e "$T/d.gguf" ] || fail "a refused export left a file"
"$LOWBIT" --quiet export "$T/r4" -o "$T/r4.gguf" || fail "export"
g=$(ppl "$T/r4.gguf")
awk -v a="$a" -v g="$g" 'BEGIN { d = (g - a) / a; if (d < 0) d = -d;
    printf "GGUF (ffn_down folded back, Q4_1): %.4f, %.2f%% from the checkpoint\n", g, 100 * d;
    exit (d < 0.03 ? 0 : 1) }' || fail "GGUF perplexity too far from the checkpoint's"

# tampered metadata: copy the checkpoint, edit config.json with sed
tamper() { # NAME SED-EXPR EXPECTED-KEY
  rm -rf "$T/$1"; cp -r "$T/r4" "$T/$1"
  sed -i "$2" "$T/$1/config.json"
  cmp -s "$T/r4/config.json" "$T/$1/config.json" && fail "$1: sed changed nothing"
  for cmd in "ppl $T/$1 --text-file $TEXT --ctx 256 -q" "plan $T/$1"; do
    # shellcheck disable=SC2086
    if "$LOWBIT" $cmd > "$T/out" 2>&1; then fail "$1: '$cmd' accepted"; fi
    grep -qF -- "$3" "$T/out" || fail "$1: '$cmd' error does not name $3: $(cat "$T/out")"
  done
  echo "$1: refused naming $3"
}
tamper kind 's/^\t\t\t\t"kind":\t"hadamard"/\t\t\t\t"kind":\t"givens"/' "meta.rotation.kind"
tamper okind 's/^\t\t\t\t\t\t"kind":\t"hadamard"/\t\t\t\t\t\t"kind":\t"haar"/' "meta.rotation.online[0].kind"
tamper module 's/"mlp.down_proj"/"mlp.up_proj"/' "meta.rotation.online[0].module"
tamper seed 's/"seed":\([[:space:]]*\)"0"/"seed":\1"0x1f"/' "meta.rotation.seed"
tamper order 's/"order":\([[:space:]]*\)384/"order":\1192/' "meta.rotation.online[0].order"
tamper m 's/"m":\([[:space:]]*\)12/"m":\120/' "meta.rotation.online[0].m"
tamper two 's/"online":\t\[{/"online":\t[{"module": "mlp.down_proj"}, {/' "meta.rotation.online"

# without its online entry the same weights give another model
rm -rf "$T/noon"; cp -r "$T/r4" "$T/noon"
awk 'BEGIN{skip=0} /"online":/ { print "\"online\": []"; skip=1; next }
     skip && /}\]/ { skip=0; next } !skip' "$T/r4/config.json" > "$T/noon/config.json"
grep -q '"online": \[\]' "$T/noon/config.json" || fail "could not drop the online entry"
n=$(ppl "$T/noon")
awk -v a="$a" -v n="$n" 'BEGIN { printf "without the online transform: %.4f\n", n; exit (n > a * 1.05 ? 0 : 1) }' \
  || fail "dropping the online transform changed nothing ($n vs $a)"
echo "cli_rotate_r4: ok"
