"""Copy of a tokenizer.json keeping ids < N and the merges among them (a
vocabulary that fits the 256-token random models of tests/data/arch;
cli_serve_arch.sh). Usage: trim_tokenizer.py SRC_DIR DST_DIR N"""
import json, sys
src, dst, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
t = json.load(open(src + "/tokenizer.json"))
v = {k: i for k, i in t["model"]["vocab"].items() if i < n}
t["model"]["vocab"] = v
keep = []
for m in t["model"]["merges"]:
    a, b = m.split(" ", 1) if isinstance(m, str) else m
    if a in v and b in v and a + b in v:
        keep.append(m)
t["model"]["merges"] = keep
t["added_tokens"] = [a for a in t.get("added_tokens") or [] if a["id"] < n]
json.dump(t, open(dst + "/tokenizer.json", "w"), ensure_ascii=False)
print(len(v), len(keep))
