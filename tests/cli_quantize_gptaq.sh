#!/bin/sh
# cli_quantize_gptaq — `lowbit quantize --method gptaq` and `--qep` end to
# end on tinystories-656k with the reference calibration ids: plain GPTQ
# checkpoints (quant_method gptq, meta.method / gptaq_alpha / qep keys),
# GPTAQ and GPTQ+QEP below GPTQ (4-bit g128 asym) through `lowbit ppl` on
# the reloaded checkpoints, RTN+QEP below RTN, the direct GGUF export of a
# QEP checkpoint (every linear on the direct route) and llama.cpp-free
# `lowbit ppl` on it, usage errors (also --rotate / --rotate-seed), a
# rotated GPTAQ checkpoint (meta.rotation, reload, direct plan) and bad
# rotation metadata naming the key, nothing left by a refused run.
set -eu
: "${LOWBIT:?set LOWBIT to the lowbit binary}"
SHARED=${LB_SHARED:-../shared}
M="$SHARED/models/tinystories-656k"
IDS="$SHARED/reference/ppl/ids/tinystories-lf.hf-tokenizers.ids.i32"
CAL="$SHARED/reference/gptq_model/calib_ids.i32"
[ -d "$M" ] && [ -f "$CAL" ] && [ -f "$IDS" ] || { echo "SKIPPED: shared data missing"; exit 77; }
command -v python3 >/dev/null 2>&1 || { echo "SKIPPED: python3 not found"; exit 77; }
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
ppl() { "$LOWBIT" --quiet --json ppl "$1" --ids "$IDS" --ctx 256 --protocol full --gptq-mode f32 -t 2 | python3 -c "import json,sys; print(json.load(sys.stdin)['ppl'])"; }
q() { out=$1; shift; "$LOWBIT" --quiet quantize "$M" -o "$T/$out" --asym --calib-ids "$CAL" --seqlen 128 -t 2 "$@" >/dev/null 2>"$T/$out.err" || { cat "$T/$out.err"; fail "quantize $*"; }; }

q gptq --method gptq
q gptaq --method gptaq
q qep --method gptq --qep
q rtn --method rtn
q rtnqep --method rtn --qep --qep-alpha 0.5
python3 - "$T" <<'PY'
import json, sys
t = sys.argv[1]
def meta(d):
    c = json.load(open(f"{t}/{d}/config.json"))["quantization_config"]
    assert c["quant_method"] == "gptq", c
    return c["meta"]
g = meta("gptaq"); assert g["method"] == "gptaq" and g["gptaq_alpha"] == 0.25 and "qep" not in g, g
q = meta("qep"); assert q["method"] == "gptq" and q["qep"] is True and q["qep_alpha"] == 0.5, q
assert "calibration" in q, q
r = meta("rtnqep"); assert r["method"] == "rtn" and r["qep"] is True and "calibration" in r, r
p = meta("gptq"); assert "qep" not in p and "gptaq_alpha" not in p, p
PY
P_G=$(ppl "$T/gptq"); P_A=$(ppl "$T/gptaq"); P_Q=$(ppl "$T/qep"); P_R=$(ppl "$T/rtn"); P_RQ=$(ppl "$T/rtnqep")
echo "ppl (full, ctx 256, 4-bit g128 asym): GPTQ $P_G, GPTAQ $P_A, GPTQ+QEP $P_Q, RTN $P_R, RTN+QEP $P_RQ"
python3 -c "g=$P_G; a=$P_A; q=$P_Q; r=$P_R; rq=$P_RQ; assert a < g and q < g - 0.3 and rq < r - 0.5, (g, a, q, r, rq)"

# direct export of the QEP checkpoint: a plain GPTQ checkpoint, every linear direct
"$LOWBIT" plan "$T/qep" >"$T/plan.txt" || fail "plan"
[ "$(grep -c ' direct ' "$T/plan.txt")" -ge 14 ] || fail "plan routes: $(cat "$T/plan.txt")"
"$LOWBIT" --quiet export "$T/qep" -o "$T/qep.gguf" --mode direct || fail "export"
P_GG=$(ppl "$T/qep.gguf")
echo "ppl: GPTQ+QEP checkpoint $P_Q, its direct GGUF $P_GG"
python3 -c "c=$P_Q; g=$P_GG; assert abs(g - c) < 0.01 * c, (c, g)"

# usage errors, nothing written
for args in "--method awq --qep" "--method gptaq --qep" "--method gptq --gptaq-alpha 0.5" \
            "--method gptq --qep-alpha 0.3" "--method gptaq --gptaq-alpha x" "--method gptq --qep --qep-alpha nan"; do
  # shellcheck disable=SC2086
  if "$LOWBIT" --quiet quantize "$M" -o "$T/bad" --calib-ids "$CAL" --seqlen 128 $args >"$T/bad.out" 2>&1; then
    fail "accepted: $args"
  fi
  grep -q -- "--qep\|--gptaq-alpha\|--qep-alpha" "$T/bad.out" || fail "message for $args: $(cat "$T/bad.out")"
  [ ! -e "$T/bad" ] || fail "output left by: $args"
done
# rotation: bad kind / seed are usage errors naming the key; a rotated
# checkpoint is refused (not written yet) and leaves nothing
for args in "--rotate foo" "--rotate hadamard --rotate-seed 12x" "--rotate hadamard --rotate-seed -1" \
            "--rotate-seed 3"; do
  # shellcheck disable=SC2086
  if "$LOWBIT" --quiet quantize "$M" -o "$T/bad" --method rtn $args >"$T/bad.out" 2>&1; then fail "accepted: $args"; fi
  grep -q -- "--rotate" "$T/bad.out" || fail "message for $args: $(cat "$T/bad.out")"
  [ ! -e "$T/bad" ] || fail "output left by: $args"
done
# a rotated GPTAQ checkpoint: meta.rotation, untied, reloads below the
# unrotated GPTAQ; every linear exports directly; bad rotation metadata
# fails naming the key
q rot --method gptaq --rotate hadamard --rotate-seed 0
python3 - "$T/rot/config.json" <<'PY'
import json, sys
c = json.load(open(sys.argv[1])); r = c["quantization_config"]["meta"]["rotation"]
assert c["tie_word_embeddings"] is False, c
assert r["kind"] == "hadamard" and r["order"] == 128 and r["seed"] == "0" and r["online"] == [], r
PY
P_ROT=$(ppl "$T/rot")
echo "ppl: GPTAQ + rotation $P_ROT (GPTAQ $P_A)"
python3 -c "r=$P_ROT; a=$P_A; assert r < a and r < 40.45, (r, a)"
"$LOWBIT" plan "$T/rot" >"$T/rplan.txt" || fail "plan rot"
grep -q '14 direct, 0 mixed, 0 fallback' "$T/rplan.txt" || fail "rotated plan: $(cat "$T/rplan.txt")"
for edit in "r['order']=64:meta.rotation.order" "r['kind']='givens':meta.rotation.kind" \
            "r['online']=['down_proj']:meta.rotation.online"; do
  rm -rf "$T/rbad"; cp -r "$T/rot" "$T/rbad"
  python3 - "$T/rbad/config.json" "${edit%%:*}" <<'PY'
import json, sys
c = json.load(open(sys.argv[1])); r = c["quantization_config"]["meta"]["rotation"]
exec(sys.argv[2]); json.dump(c, open(sys.argv[1], "w"))
PY
  if "$LOWBIT" --quiet ppl "$T/rbad" --ids "$IDS" --ctx 256 >"$T/rbad.out" 2>&1; then fail "ran with ${edit%%:*}"; fi
  grep -q "${edit#*:}" "$T/rbad.out" || fail "message for ${edit%%:*}: $(cat "$T/rbad.out")"
  if "$LOWBIT" plan "$T/rbad" >"$T/rbad.out" 2>&1; then fail "plan with ${edit%%:*}"; fi
done
echo "ok"
