#!/usr/bin/env python3
"""Generate tests/data/tokenizer_components.json: small BPE tokenizers trained
with Hugging Face tokenizers (0.23.1 in ../shared/tools/refenv.sh) that use
the components the four real tokenizers do not (Metaspace, Split behaviours,
invert, Whitespace/WhitespaceSplit/Digits, Lowercase/NFKC/Strip/regex
Replace normalizers, continuing_subword_prefix / end_of_word_suffix, BPE and
Metaspace decoders, ByteLevel add_prefix_space, Roberta post-processing,
added tokens with lstrip/rstrip/single_word/normalized), with the oracle's
ids, tokens and decodes for a fixed list of texts.

  sh ../shared/tools/refenv.sh setup --torch
  sh ../shared/tools/refenv.sh run python3 tests/data/gen_tokenizer_components.py
"""
import json, os
import tokenizers
from tokenizers import Tokenizer, AddedToken, models, normalizers as N, pre_tokenizers as P, decoders as D, processors, trainers, Regex

here = os.path.dirname(os.path.abspath(__file__))
corpus_path = os.path.join(here, "../../../shared/corpora/tinystories/tinystories_sample_cs336.txt")
corpus = open(corpus_path, encoding="utf-8").read().splitlines()
corpus += ["café naïve façade Ångström", "1,000,000 and 3.14159", "don't WON'T it's",
           "Hello World HELLO world", "x = f(y) + 42;", "ÆØÅ æøå ß ﬁ ①②③ Ⅻ"]

TEXTS = ["", " ", "Hello world", " Hello  world ", "Once upon a time, there was a little girl.",
         "don't STOP 12345 and 3.14", "\tTabs\tand\nnew lines\r\n", "café naïve ﬁ ①② Ⅻ",
         "a<sep>b <sep> c<sep>", "[MASK] hello [MASK]world", "lily and lilypad lily", "x", "   ",
         "Ünïcödé ÀÉÎ", "end."]

def train(model, norm, pre, dec, post, trainer_kw, added=None, special=None):
    tok = Tokenizer(model)
    if norm is not None: tok.normalizer = norm
    if pre is not None: tok.pre_tokenizer = pre
    if dec is not None: tok.decoder = dec
    kw = dict(vocab_size=trainer_kw.get("vocab", 400), min_frequency=1,
              special_tokens=special or [], show_progress=False,
              initial_alphabet=trainer_kw.get("alphabet", []))
    if trainer_kw.get("csp"): kw["continuing_subword_prefix"] = trainer_kw["csp"]
    if trainer_kw.get("eow"): kw["end_of_word_suffix"] = trainer_kw["eow"]
    tr = trainers.BpeTrainer(**kw)
    tok.train_from_iterator(corpus, tr)
    if added: tok.add_tokens(added)
    if post is not None: tok.post_processor = post
    return tok

configs = []
def add(name, tok):
    js = json.loads(tok.to_str())
    t2 = Tokenizer.from_str(tok.to_str())
    cases = []
    for text in TEXTS:
        for add_sp in (False, True):
            e = t2.encode(text, add_special_tokens=add_sp)
            cases.append({"text": text, "add_special_tokens": add_sp, "ids": e.ids, "tokens": e.tokens,
                          "decoded": t2.decode(e.ids, skip_special_tokens=False),
                          "decoded_skip_special": t2.decode(e.ids, skip_special_tokens=True)})
    configs.append({"name": name, "tokenizer": js, "cases": cases})

# 1. Metaspace (prepend first, split) + Metaspace decoder, unk + fuse_unk, Roberta post
add("metaspace-first", train(models.BPE(unk_token="<unk>", fuse_unk=True), None,
    P.Metaspace(replacement="\u2581", prepend_scheme="first", split=True),
    D.Metaspace(replacement="\u2581", prepend_scheme="first", split=True),
    processors.RobertaProcessing(("</s>", 2), ("<s>", 1)), {}, special=["<unk>", "<s>", "</s>", "<sep>"]))
# 2. Metaspace always, no split
add("metaspace-always-nosplit", train(models.BPE(unk_token="<unk>"), N.NFKC(),
    P.Metaspace(replacement="\u2581", prepend_scheme="always", split=False),
    D.Metaspace(replacement="\u2581", prepend_scheme="always", split=False), None, {},
    special=["<unk>"]))
# 3. Lowercase + Strip + WhitespaceSplit + ## prefix + </w> suffix + BPEDecoder
add("wordpiece-like", train(models.BPE(unk_token="<unk>", continuing_subword_prefix="##", end_of_word_suffix="</w>"),
    N.Sequence([N.Lowercase(), N.Strip(left=True, right=True)]),
    P.WhitespaceSplit(), D.BPEDecoder(suffix="</w>"), None, {"csp": "##", "eow": "</w>"},
    special=["<unk>"]))
# 4. Whitespace + Digits(individual) + NFD + regex Replace
add("whitespace-digits", train(models.BPE(unk_token="<unk>"),
    N.Sequence([N.NFD(), N.Replace(Regex("\\s+"), " ")]),
    P.Sequence([P.Whitespace(), P.Digits(individual_digits=True)]), None, None, {},
    special=["<unk>"]))
# 5. Split behaviours and invert
for beh in ["removed", "isolated", "merged_with_previous", "merged_with_next", "contiguous"]:
    for inv in (False, True):
        add("split-%s%s" % (beh, "-invert" if inv else ""), train(models.BPE(unk_token="<unk>"), None,
            P.Split(Regex("[aeiou]+| "), behavior=beh, invert=inv), None, None, {"vocab": 200},
            special=["<unk>"]))
add("split-string-pattern", train(models.BPE(unk_token="<unk>"), None,
    P.Split(" ", behavior="merged_with_previous"), None, None, {"vocab": 200}, special=["<unk>"]))
# 6. ByteLevel with add_prefix_space + its regex, added tokens with options
add("bytelevel-prefix", train(models.BPE(), None, P.ByteLevel(add_prefix_space=True, use_regex=True),
    D.ByteLevel(), processors.ByteLevel(trim_offsets=True),
    {"alphabet": P.ByteLevel.alphabet()},
    added=[AddedToken("<sep>", lstrip=True, rstrip=True, special=True, normalized=False),
           AddedToken("[MASK]", single_word=True, special=False, normalized=False),
           AddedToken("lily", single_word=True, normalized=True)],
    special=["<|endoftext|>"]))
# 7. Lowercase normalizer + normalized added tokens
add("normalized-added", train(models.BPE(unk_token="<unk>", byte_fallback=False), N.Lowercase(),
    P.Whitespace(), None, processors.TemplateProcessing(single="<s> $A </s>", special_tokens=[("<s>", 1), ("</s>", 2)]),
    {}, added=[AddedToken("HELLO", normalized=True), AddedToken("World", normalized=True, rstrip=True)],
    special=["<unk>", "<s>", "</s>"]))

# Extra texts for the four real tokenizers: unusual whitespace (U+0085,
# U+00A0, U+1680, U+2000.., U+2028/9, U+3000, U+FEFF, U+180E, U+001C..),
# recent / rare letters and digits, case folding, combining marks.
EXTRA = ["a\u0085b c", "x\u00a0 y", "p\u1680q", "a\u2000\u2001b", "l\u2028m\u2029n",
         "u\u202fv\u205fw\u3000z", "\ufeffhi \ufeff", "a\u180eb", "k\u001c\u001d\u001e\u001fk",
         "v\u000bw\u000cx", "  \u00a0\u00a0x", "a \u3000 b", "\U0001e030\U0001e031 text",
         "\u0cf3 kannada", "\U0001d7d8\U0001d7d9 123", "\u2167 \u2177 \u2189", "\u01c5 \u01c8",
         "\u0130stanbul \u03a3\u0391\u03a3", "a\u0301\u0302b", "\u1e9e\u00df", "x'S y'LL z'Ve",
         "\ufb01 \ufb02", "\u0663\u0664\u0665 \u06f1\u06f2", "\U0001d49c\U0001d4d1",
         "\u200d\u200c", "\U0001F600\U0001F3FD", "!!!\n\n\n   ", "a\r\n\r\nb", "\t\t x", "end \n"]
real = {}
for name, path in [("qwen3", "tokenizers/qwen3"), ("llama3", "tokenizers/llama3"),
                   ("mistral-v0.1", "tokenizers/mistral-7b-v0.1"), ("tinystories-656k", "models/tinystories-656k")]:
    t = Tokenizer.from_file(os.path.join(here, "../../../shared", path, "tokenizer.json"))
    real[name] = {"path": path, "cases": [{"text": x, "ids": t.encode(x, add_special_tokens=False).ids}
                                          for x in EXTRA]}

out = {"generator": "tests/data/gen_tokenizer_components.py", "tokenizers_version": tokenizers.__version__,
       "texts": TEXTS, "configs": configs, "real_extra": real}
with open(os.path.join(here, "tokenizer_components.json"), "w", encoding="utf-8") as f:
    json.dump(out, f, ensure_ascii=False)
print("configs:", len(configs), "cases:", sum(len(c["cases"]) for c in configs))
