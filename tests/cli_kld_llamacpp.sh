#!/bin/sh
# cli_kld_llamacpp — KL-divergence base files interchangeable with llama.cpp
# 0.7.0's llama-perplexity (reference chroot, ../shared/tools/refenv.sh):
#  1. base files of stories260K F32 (TinyStories text, ctx 128, 40 chunks) made by
#     `llama-perplexity --kl-divergence-base` and by `lowbit ppl
#     --save-logits` have the same size and the same header and token bytes;
#  2. each tool reads both files (--kl-divergence / --kl-base) for the Q8_0
#     model: "Mean PPL(base)" — read from the file — is the same to all 6
#     printed decimals in both tools; "Mean PPL(Q)" within 0.1% (the F32/Q8_0
#     bound of test_ppl_llamacpp); mean KLD within 5%; same top p within 1
#     percentage point; the file's row decoded by both is the same data;
#  3. refusals: a base for another vocabulary (stories260K's 512 tokens on
#     tinystories-656k's 2048), for another text, a truncated file, a file
#     that is not a base, --ctx that differs from the file's.
# Skipped (77) without the chroot or llama-perplexity in it.
set -eu
: "${LOWBIT:?set LOWBIT to the lowbit binary}"
SHARED=${LB_SHARED:-../shared}
REFENV="$SHARED/tools/refenv.sh"
S="$SHARED/models/stories260K"
TXT="$SHARED/reference/ppl/texts/tinystories-valid-head30k.lf.txt"
[ -f "$REFENV" ] && [ -f "$S/stories260K.gguf" ] && [ -f "$TXT" ] || { echo "SKIPPED: ../shared not found"; exit 77; }
sh "$REFENV" path >/dev/null 2>&1 || { echo "SKIPPED: reference chroot not built"; exit 77; }
sh "$REFENV" has llama-perplexity || { echo "SKIPPED: llama-perplexity not in the chroot"; exit 77; }
command -v python3 >/dev/null 2>&1 || { echo "SKIPPED: python3 not found"; exit 77; }
T=$(mktemp -d /tmp/lb-kld.XXXXXX)
trap 'rm -rf "$T"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

. "$(dirname "$0")/lib_refenv.sh"
# llama.cpp 0.7.0's tools sometimes lose the tail of their output (more often
# the busier the machine): ref_call retries, bounded, until the summary line
# is there (lib_refenv.sh)
llama() { # LOG ARGS...
    log=$1; shift
    ref_call "$log" "$log" 'Final estimate: PPL|^Same top p:' llama-perplexity "$@" -t 2 \
        || { tail -5 "$log" 2>/dev/null; fail "llama-perplexity $*: $ref_reason"; }
}

# the first 40 chunks (2,520 scored tokens) keep the test short
llama "$T/llama-base.log" -m "$S/stories260K.gguf" -f "$TXT" -c 128 --chunks 40 --kl-divergence-base "$T/llama-base.bin"
"$LOWBIT" ppl "$S/stories260K.gguf" --text-file "$TXT" --ctx 128 --chunks 40 -t 2 --save-logits "$T/lb-base.bin" >/dev/null 2>&1
for b in llama lb; do
    llama "$T/llama-kl-$b.log" -m "$S/stories260K-Q8_0.gguf" -c 128 --kl-divergence-base "$T/$b-base.bin" --kl-divergence
    "$LOWBIT" ppl "$S/stories260K-Q8_0.gguf" --text-file "$TXT" -t 2 --kl-base "$T/$b-base.bin" >"$T/lb-kl-$b.txt" 2>/dev/null
    # the same file without the text: its own tokens, as llama.cpp
    "$LOWBIT" ppl "$S/stories260K-Q8_0.gguf" -t 2 --kl-base "$T/$b-base.bin" >"$T/lb-kl-$b-notext.txt" 2>/dev/null
    cmp -s "$T/lb-kl-$b.txt" "$T/lb-kl-$b-notext.txt" || fail "--kl-base with and without the text differ"
done
python3 - "$T" <<'PY'
import re, struct, sys
T = sys.argv[1]
a = open(f"{T}/llama-base.bin", "rb").read(); b = open(f"{T}/lb-base.bin", "rb").read()
assert len(a) == len(b), (len(a), len(b))
n_ctx, V, nch = struct.unpack("<3i", a[8:20])
head = 20 + 4 * n_ctx * nch
assert a[:head] == b[:head], "header or tokens differ"
print(f"base files: {len(a)} bytes, n_ctx {n_ctx}, n_vocab {V}, {nch} chunks; header and tokens identical")
def stats(path):
    txt = open(path, encoding="utf-8", errors="replace").read()
    g = lambda k: float(re.search(re.escape(k) + r"\s*:\s*(-?[0-9.]+)", txt).group(1))
    return {"ppl_q": g("Mean PPL(Q)"), "ppl_base": g("Mean PPL(base)"),
            "kld": g("Mean    KLD"), "same": g("Same top p"),
            "ppl_base_s": re.search(r"Mean PPL\(base\)\s*:\s*(\S+)", txt).group(1)}
for f in ("llama", "lb"):
    L = stats(f"{T}/llama-kl-{f}.log"); W = stats(f"{T}/lb-kl-{f}.txt")
    assert L["ppl_base_s"] == W["ppl_base_s"], (f, L, W)
    assert abs(L["ppl_q"] - W["ppl_q"]) <= 1e-3 * L["ppl_q"], (f, L, W)
    assert abs(L["kld"] - W["kld"]) <= 0.05 * L["kld"], (f, L, W)
    assert abs(L["same"] - W["same"]) <= 1.0, (f, L, W)
    print(f"{f} base: PPL(base) {W['ppl_base_s']} in both; PPL(Q) {L['ppl_q']} vs {W['ppl_q']}; "
          f"KLD {L['kld']} vs {W['kld']}; same top p {L['same']}% vs {W['same']}%")
PY
for k in "Mean    KLD:" "99.0%   KLD:" "Median  KLD:" "RMS Δp    :" "Same top p:" "Mean PPL(Q)/PPL(base)"; do
    grep -q "^$k" "$T/lb-kl-lb.txt" || fail "lowbit does not print '$k'"
done
"$LOWBIT" --json ppl "$S/stories260K-Q8_0.gguf" -t 2 --kl-base "$T/lb-base.bin" >"$T/kl.json" 2>/dev/null
python3 -c "import json,sys; j=json.load(open(sys.argv[1]))['kl']; assert j['count']==2520 and 0<j['kld_mean']<0.01 and 90<100*j['same_top_p']<=100, j" "$T/kl.json"

# refusals, saying why
refuse() { # expected-message ARGS...
    msg=$1; shift
    if "$LOWBIT" ppl "$@" >"$T/r.out" 2>"$T/r.err"; then fail "accepted: $*"; fi
    grep -q "$msg" "$T/r.err" || { cat "$T/r.err"; fail "message for: $*"; }
}
refuse "made for a vocabulary of 512 tokens; this model has 2048" "$SHARED/models/tinystories-656k" --kl-base "$T/lb-base.bin"
refuse "another text" "$S/stories260K-Q8_0.gguf" --text-file "$SHARED/corpora/tinystories/tinystories_sample_cs336.txt" --kl-base "$T/lb-base.bin"
head -c 100000 "$T/lb-base.bin" >"$T/trunc.bin"
refuse "(truncated)" "$S/stories260K-Q8_0.gguf" --kl-base "$T/trunc.bin"
refuse "does not look like a --kl-divergence-base file" "$S/stories260K-Q8_0.gguf" --kl-base "$TXT"
refuse "was made with n_ctx 128" "$S/stories260K-Q8_0.gguf" --ctx 64 --kl-base "$T/lb-base.bin"
refuse "llama-perplexity's protocol" "$S/stories260K-Q8_0.gguf" --protocol full --text-file "$TXT" --kl-base "$T/lb-base.bin"
# a failed --save-logits leaves no file
printf 'Once upon a time there was a little dog.' >"$T/short.txt"
refuse "needs at least 2\*n_ctx" "$S/stories260K.gguf" --text-file "$T/short.txt" --ctx 8 --save-logits "$T/none.bin"
[ -e "$T/none.bin" ] && fail "a failed --save-logits left a file"
ls "$T" | grep -q "none.bin" && fail "a failed --save-logits left a temp file"
echo "cli_kld_llamacpp: OK"
