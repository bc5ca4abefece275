"""Sample ML abstracts for the question-writing helpers: singles and related pairs, split by document into halves."""
import glob, gzip, hashlib, json, random
from sklearn.feature_extraction.text import TfidfVectorizer
import numpy as np

CORPUS = "/work/shared/corpora/ml_abstracts.jsonl.gz"
docs = [json.loads(l) for l in gzip.open(CORPUS)]
used = set()
for f in glob.glob("/work/main/eval/*.jsonl"):
    for l in open(f):
        if l.strip():
            r = json.loads(l)
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
for h in range(HELPERS):
    singles = []
    for want in ("dev", "test"):
        n = 0
        while n < SINGLES // 2:
            i = order[pos]; pos += 1
            if i in taken or half(docs[i]["_id"]) != want:
                continue
            singles.append(i); taken.add(i); n += 1
    pairs = []
    for want in ("dev", "test"):
        n = 0
        while n < PAIRS // 2:
            i = order[pos]; pos += 1
            if i in taken or half(docs[i]["_id"]) != want:
                continue
            sims = (X @ X[i].T).toarray().ravel()
            sims[i] = -1
            for j in np.argsort(-sims)[:50]:
                j = int(j)
                if j not in taken and half(docs[j]["_id"]) == want and docs[j]["_id"] not in used and sims[j] < 0.6:
                    pairs.append((i, j)); taken |= {i, j}; n += 1
                    break
    batches.append((singles, pairs))

for h, (singles, pairs) in enumerate(batches, start=1):
    with open(f"batch{h}.md", "w") as out:
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
