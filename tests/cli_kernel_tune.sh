#!/bin/sh
# cli_kernel_tune — the measured kernel choice (src/kernels/tune.c; X16
# decode kernels, and AMX's prefill kernels against the others): the choice
# is cached once per CPU / microcode / family / version and then read, not
# measured again; a cached choice of another family's decode kernel changes
# the decode kernel `lowbit version` names (prefill unchanged) and not one
# byte of the
# log-probabilities (every X16 kernel of a type gives the same bits);
# LB_TUNE=0 ignores the choice, LB_TUNE=1 measures again, a corrupt file is
# replaced, LB_KERNELS pins the family (no choice). The choice exists only
# where two families have different X16 kernels (avx_vnni, avx512_vnni, amx); on other
# machines this checks that no file is written and reports SKIPPED.
set -eu
: "${LOWBIT:?set LOWBIT to the lowbit binary}"
shared=${LB_SHARED:-../shared}
M=$shared/models/tinystories-656k-gguf/ts656k-q4_0.gguf
TXT=$shared/corpora/tinystories/tinystories_sample_cs336.txt
T=$(mktemp -d "${TMPDIR:-/tmp}/lb-tune.XXXXXX")
trap 'rm -rf "$T"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
unset LB_TUNE LB_KERNELS LB_FORCE_REF LB_REPACK
export LB_CACHE_DIR="$T/cache"

"$LOWBIT" version > "$T/v1.txt"
fam=$(sed -n 's/^kernels: //p' "$T/v1.txt")
set -- "$LB_CACHE_DIR"/kernels-*.txt
if [ ! -f "$1" ]; then
  case $fam in avx_vnni|avx512_vnni|amx) fail "no kernel-choice cache written on $fam" ;; esac
  echo "SKIPPED: kernel family $fam has no second X16 decode kernel to choose (no cache file: right)"
  exit 77
fi
f=$1
head -n 1 "$f" | grep -q "kernel choice v4 | cpu .* | family $fam | candidates [0-9a-f]\{16\}\$" \
  || fail "cache header: $(head -n 1 "$f")"
grep -q '^Q4_0 mm_q4_0_x16_' "$f" || fail "no Q4_0 choice in the cache"
cp "$f" "$T/orig"
ino=$(stat -c %i "$f")
# read, not measured again (the file is not replaced)
"$LOWBIT" version > "$T/v2.txt"
[ "$(stat -c %i "$f")" = "$ino" ] || fail "the cache was rewritten although it matched"
cmp -s "$T/v1.txt" "$T/v2.txt" || fail "a cached run names other kernels than the measuring run"

# the family's own Q4_0 kernels (LB_TUNE=0), e.g. "mm_q4_0_x16_avx512_vnni"
own=$(LB_TUNE=0 "$LOWBIT" version | sed -n 's/^  Q4_0  decode \([^,]*\), prefill \(.*\)$/\1 \2/p')
own_dec=${own% *}
# the prefill kernel of the measuring run (AMX machines: AMX's or the one
# that measured faster)
tuned_pre=$(sed -n 's/^  Q4_0  decode [^,]*, prefill \(.*\)$/\1/p' "$T/v1.txt")
case $own_dec in mm_q4_0_x16_avx512*|mm_q4_0_x16_avx_vnni) ;; *) fail "family $fam decodes Q4_0 with '$own_dec'" ;; esac
# a cached choice of the AVX2 decode kernel: decode named so, prefill as before
sed 's/^Q4_0 .*/Q4_0 mm_q4_0_x16_avx2/' "$T/orig" > "$f"
"$LOWBIT" version | grep -q "^  Q4_0  decode mm_q4_0_x16_avx2, prefill $tuned_pre\$" \
  || fail "cached avx2 decode choice not used: $("$LOWBIT" version | grep Q4_0)"
LB_KERNELS=$fam "$LOWBIT" version | grep -q "^  Q4_0  decode $own_dec," \
  || fail "LB_KERNELS=$fam does not pin the family's decode kernel"
# ... and the same bytes: decode-sized batches (8 tokens) through either kernel
"$LOWBIT" ppl "$M" --text-file "$TXT" --ctx 64 --batch 8 --chunks 3 -t 2 \
  --save-logits "$T/avx2dec.bin" --json > "$T/a.json"
LB_TUNE=0 "$LOWBIT" ppl "$M" --text-file "$TXT" --ctx 64 --batch 8 --chunks 3 -t 2 \
  --save-logits "$T/own.bin" --json > "$T/b.json"
cmp "$T/avx2dec.bin" "$T/own.bin" || fail "log-probabilities differ between the decode kernels"
cmp -s "$T/a.json" "$T/b.json" || fail "ppl differs: $(cat "$T/a.json") vs $(cat "$T/b.json")"

# LB_TUNE=1 measures again and replaces the file; so does a corrupt file
ino=$(stat -c %i "$f")
LB_TUNE=1 "$LOWBIT" version > /dev/null
[ "$(stat -c %i "$f")" != "$ino" ] || fail "LB_TUNE=1 did not measure again and replace the cache"
printf 'garbage\n\001\002' > "$f"
"$LOWBIT" version > /dev/null
head -n 1 "$f" | grep -q "kernel choice v4" || fail "a corrupt cache was not replaced"
# an unwritable cache directory: the choice is still made, nothing fails
LB_CACHE_DIR=/proc/lowbit-no-such-dir "$LOWBIT" version | grep -q "^kernels: $fam" || fail "unwritable cache dir"
echo "ok: kernel choice cached, read, overridden, same bytes ($fam)"
