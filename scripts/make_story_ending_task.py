#!/usr/bin/env python3
"""Build the TinyStories story-ending task (lowbit eval's task format).

From the TinyStories validation head (../shared/corpora/tinystories/
TinyStories-valid-head30k.txt, one story per line): for each story, up to
three cut points after sentence k (2 <= k <= 10); the context is the story's
first k sentences, the choices the true next sentence and three sentences
drawn from other stories, shuffled. The last two stories give the few-shot
pool ("fewshot": true). Distractors are
within 0.7x..1.4x of the true sentence's length. Also writes the first five stories as rolling
log-likelihood documents. Python standard library only; deterministic
(random.Random(SEED)); re-running gives the same bytes. Repeated stories
are kept once.

usage: python3 scripts/make_story_ending_task.py [SRC] [OUT_DIR]
"""
import json
import random
import re
import sys

SEED = 20261203
SRC = sys.argv[1] if len(sys.argv) > 1 else "../shared/corpora/tinystories/TinyStories-valid-head30k.txt"
OUT = sys.argv[2] if len(sys.argv) > 2 else "tests/data/eval"


def sentences(story):
    # a sentence ends at . ! or ? (optionally followed by a closing quote)
    parts = re.split(r'(?<=[.!?]["\'])\s+|(?<=[.!?])\s+', story.strip())
    return [p.strip() for p in parts if p.strip()]


def main():
    with open(SRC, encoding="utf-8") as f:
        stories = [line.strip() for line in f if line.strip()]
    # the head is cut at 30 KB: drop a last story that does not end a sentence
    if stories and stories[-1][-1] not in '.!?"\'':
        stories.pop()
    # the validation text repeats some stories: keep the first of each
    seen = set()
    stories = [s for s in stories if not (s in seen or seen.add(s))]
    sents = [sentences(s) for s in stories]
    rng = random.Random(SEED)
    items = []
    n_pool_stories = 2
    for si, ss in enumerate(sents):
        if len(ss) < 4:
            continue
        cuts = list(range(2, min(len(ss) - 1, 10) + 1))
        rng.shuffle(cuts)
        for k in sorted(cuts[:3]):
            gold_s = ss[k]
            # distractors of about the gold sentence's length, so that the
            # raw log-likelihood (acc) does not simply prefer short choices
            others = [s for sj, o in enumerate(sents) if sj != si for s in o
                      if s != gold_s
                      and 0.7 * len(gold_s) <= len(s) <= 1.4 * len(gold_s)]
            if len(others) < 3:
                others = [s for sj, o in enumerate(sents) if sj != si
                          for s in o if s != gold_s]
            distract = rng.sample(others, 3)
            choices = [gold_s] + distract
            order = list(range(4))
            rng.shuffle(order)
            shuffled = [choices[i] for i in order]
            item = {"context": " ".join(ss[:k]), "choices": shuffled,
                    "gold": order.index(0)}
            if si >= len(sents) - n_pool_stories:
                item["fewshot"] = True
            items.append(item)
    with open(f"{OUT}/tinystories_ending.jsonl", "w", encoding="utf-8") as f:
        for it in items:
            f.write(json.dumps(it, ensure_ascii=False) + "\n")
    with open(f"{OUT}/tinystories_docs.jsonl", "w", encoding="utf-8") as f:
        for s in stories[:5]:
            f.write(json.dumps({"text": s}, ensure_ascii=False) + "\n")
    n_few = sum(1 for it in items if it.get("fewshot"))
    print(f"{len(items) - n_few} items + {n_few} few-shot items from "
          f"{len(stories)} stories; 5 documents")


if __name__ == "__main__":
    main()
