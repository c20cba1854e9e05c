#!/bin/sh
# CLI test for `lowbit tokenize`. Expected ids are copied from
# ../shared/reference/tokenize/*.jsonl (Hugging Face tokenizers 0.23), not
# from lowbit's own output.
set -u
: "${LOWBIT:?set LOWBIT to the lowbit binary}"
S=${LB_SHARED:-../shared}
[ -f "$S/tokenizers/qwen3/tokenizer.json" ] || { echo "SKIPPED: $S missing"; exit 77; }
fail=0
check() { # name expected actual
    if [ "$2" = "$3" ]; then echo "ok   $1"; else echo "FAIL $1: expected [$2] got [$3]"; fail=1; fi
}

# qwen3.jsonl case 6: "Hello world" -> [9707, 1879]
check qwen3-json '{"ids": [9707, 1879]}' "$("$LOWBIT" tokenize "$S/tokenizers/qwen3" "Hello world" --json)"
# llama3.jsonl case 7: " Hello world" -> [22691, 1917] (global flag before the command args)
check llama3-json '{"ids": [22691, 1917]}' "$("$LOWBIT" --json tokenize "$S/tokenizers/llama3" " Hello world")"
# mistral-v0.1.jsonl case 74 (add_special_tokens=true): [1, 22557, 1526]
check mistral-bos '{"ids": [1, 22557, 1526]}' "$("$LOWBIT" tokenize "$S/tokenizers/mistral-7b-v0.1" "Hello world" --json)"
# tinystories-656k.jsonl case 74 (true) and case 6 (false)
check ts-bos '{"ids": [1, 80, 1288, 139, 410, 555]}' \
    "$("$LOWBIT" tokenize "$S/models/tinystories-656k/tokenizer.json" "Hello world" --json)"
check ts-no-special '{"ids": [80, 1288, 139, 410, 555]}' \
    "$("$LOWBIT" tokenize "$S/models/tinystories-656k" "Hello world" --no-special --json)"
# qwen3.jsonl case 54 via stdin (special tokens in the text, newlines)
check qwen3-stdin '{"ids": [151644, 872, 198, 9707, 0, 151645, 198, 151644, 77091, 198]}' \
    "$(printf '<|im_start|>user\nHello!<|im_end|>\n<|im_start|>assistant\n' | "$LOWBIT" tokenize "$S/tokenizers/qwen3" - --no-special --json)"
# llama-tokenize style lines: "%6d -> 'piece'"
out=$("$LOWBIT" tokenize "$S/tokenizers/qwen3" "Hello world" --no-special)
check qwen3-text "  9707 -> 'Hello'
  1879 -> ' world'" "$out"
# GGUF vocabulary (llama.cpp SPM): llamacpp_crosscheck.json lists no
# difference for "Hello world", so llama.cpp gives tinystories-656k.jsonl
# case 74 (BOS added: tokenizer.ggml.add_bos_token) and case 6 (--no-special)
G="$S/models/tinystories-656k-gguf/ts656k-f32.gguf"
if [ -f "$G" ]; then
    check gguf-bos '{"ids": [1, 80, 1288, 139, 410, 555]}' "$("$LOWBIT" tokenize "$G" "Hello world" --json)"
    check gguf-no-special '{"ids": [80, 1288, 139, 410, 555]}' "$("$LOWBIT" tokenize "$G" "Hello world" --no-special --json)"
fi
# errors: missing model -> 1 with a message naming it; no arguments -> 2
"$LOWBIT" tokenize "$S/no-such-model" x >/dev/null 2>err.$$; rc=$?
check missing-rc 1 "$rc"
grep -q "no-such-model" err.$$ && echo "ok   missing-msg" || { echo "FAIL missing-msg"; fail=1; }
rm -f err.$$
"$LOWBIT" tokenize >/dev/null 2>&1; rc=$?
check usage-rc 2 "$rc"
exit $fail
