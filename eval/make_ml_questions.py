"""Draw the batches of ML abstracts the helpers wrote ``eval/ml_questions.jsonl`` from (``eval/ml_questions.md``):
per helper, 32 single abstracts (16 of each half) and 6 pairs of related abstracts (3 of each half), written as
``batchN.md`` files into the folder given (default ``/tmp/ml-question-batches``).

    python eval/make_ml_questions.py [OUT_DIR]   # run at the commit that added the set: it skips the abstracts
                                                 # the question sets of that commit used
"""
import glob
import gzip
import hashlib
import json
import random
import sys
from pathlib import Path

import numpy as np
from sklearn.feature_extraction.text import TfidfVectorizer

ROOT = Path(__file__).resolve().parent.parent
CORPUS = ROOT.parent / "shared" / "corpora" / "ml_abstracts.jsonl.gz"
OUT = Path(sys.argv[1] if len(sys.argv) > 1 else "/tmp/ml-question-batches")
OUT.mkdir(parents=True, exist_ok=True)
docs = [json.loads(line) for line in gzip.open(CORPUS)]
used = set()  # the abstracts the question sets of that day already asked about
for f in glob.glob(str(ROOT / "eval" / "*.jsonl")):
    for line in open(f):
        if line.strip():
            r = json.loads(line)
            used |= set(r.get("qrels") or {})
            used |= {p.get("doc_id") for p in r.get("papers") or []}


def half(doc_id):  # by document: the sha1 of its id
    return "dev" if hashlib.sha1(doc_id.encode()).digest()[0] % 2 else "test"


ok = [i for i, d in enumerate(docs) if d["_id"] not in used and 60 <= len(d["text"].split()) <= 400]
rng = random.Random(20261207)
order = rng.sample(ok, len(ok))
HELPERS, SINGLES, PAIRS = 7, 32, 6
vec = TfidfVectorizer(stop_words="english", min_df=2, max_df=0.2, sublinear_tf=True)
X = vec.fit_transform([d["title"] + " " + d["text"] for d in docs])
taken = set()
batches = []
pos = 0


def next_in(want: str) -> int:
    """The next abstract of the shuffled order that is in half ``want`` and not taken yet."""
    global pos
    while True:
        i = order[pos]
        pos += 1
        if i not in taken and half(docs[i]["_id"]) == want:
            return i


for h in range(HELPERS):
    singles = []
    for want in ("dev", "test"):
        for _ in range(SINGLES // 2):
            singles.append(next_in(want))
            taken.add(singles[-1])
    pairs = []
    for want in ("dev", "test"):
        n = 0
        while n < PAIRS // 2:
            i = next_in(want)
            sims = (X @ X[i].T).toarray().ravel()
            sims[i] = -1
            for j in np.argsort(-sims)[:50]:
                j = int(j)
                if j not in taken and half(docs[j]["_id"]) == want and docs[j]["_id"] not in used and sims[j] < 0.6:
                    pairs.append((i, j))
                    taken |= {i, j}
                    n += 1
                    break
    batches.append((singles, pairs))

for h, (singles, pairs) in enumerate(batches, start=1):
    with open(OUT / f"batch{h}.md", "w") as out:
        out.write(f"# Batch {h}\n\n## Single abstracts\n\n")
        for i in singles:
            d = docs[i]
            out.write(f"### {d['_id']} (half: {half(d['_id'])})\nTitle: {d['title']}\n\n{d['text']}\n\n")
        out.write("## Pairs of related abstracts (for two-paper questions)\n\n")
        for k, (i, j) in enumerate(pairs, start=1):
            out.write(f"### Pair {k} (half: {half(docs[i]['_id'])})\n")
            for x in (i, j):
                d = docs[x]
                out.write(f"#### {d['_id']}\nTitle: {d['title']}\n\n{d['text']}\n\n")
print(pos, len(taken))
