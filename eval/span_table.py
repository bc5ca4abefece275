"""Sub-sentence answer spans without a language model: token-F1, span hit and gold-token recall of the top-1
evidence sentence against parts of it, on a span benchmark's dev half (COVID-QA), with oracle bounds; or, for a
dev set of expected strings (``eval/devset.jsonl``, ``eval/ml_devset.jsonl``), how often the expected string that
the top sentence of the gold paper holds is still in the part that would be stated.

    .venv/bin/python eval/span_table.py ../shared/benchmarks/covidqa [--sample 300 (0: all)] [--seed 1] [--rest]
    .venv/bin/python eval/span_table.py --devset eval/ml_devset.jsonl --corpus ../shared/corpora/ml_abstracts.jsonl.gz

Every answer is rendered as the service renders it (:func:`~citerag.service.answering.compose.compose`, markers
stripped as ``eval/qa.py`` strips them); a part's span hit is judged on its own document offsets. Variants:

* ``sentence``: the whole top-1 evidence sentence (what the service stated before session 9);
* ``labels+refs``: only leading labels and the document's own references off its edges;
* ``trim``: the restating and function words off its edges too (:func:`~citerag.service.answering.span.trimmed`);
* ``part``: ``trim`` plus a quantity/time question's number phrase (:func:`~citerag.service.answering.span.answer_span`,
  the shipped rule);
* ``anchor onward`` / ``anchor clause``: clause-level choices (clauses cut at ``, ; :``, parentheses and
  ``which/while/whereas/but/although/because/who/whose/where``; the anchor is the clause with the most question
  words): the anchor clause to the sentence's end, or the anchor clause alone grown by a neighbour (the next one
  first) until it holds 4 content words, each then trimmed;
* oracle rows: the best whole sentence / clause / run of consecutive clauses among all candidate sentences of the
  top-k passages, and the best clause / clause run of the top-1 sentence (upper bounds; they read the gold).
"""

from __future__ import annotations

import argparse
import gzip
import json
import statistics
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from citerag.eval import qa_metrics as m
from citerag.eval.answers import normalise
from citerag.eval.qa import half, load_qa, sample
from citerag.index.ingest import read_corpus
from citerag.index.search import SearchResult
from citerag.index.types import Document, Passage
from citerag.service.answering import span as sp
from citerag.service.answering.compose import compose
from citerag.service.answering.evidence import Evidence, select_evidence
from citerag.service.context import merge_same_document
from citerag.index.lifecycle import ensure_index
from citerag.service.pipeline import index_setup, load_embedder, open_retriever
from citerag.service.settings import Settings

#: A variant maps (question, sentence text) to a part [start, end) of the text.
Variant = Callable[[str, str], tuple[int, int]]
_CLAUSE_WORDS = frozenset("which whereas while but although though because who whose where".split())


def clauses(words: sp._Words) -> list[tuple[int, int]]:
    """Word ranges of the clauses of a sentence (module docstring)."""
    cuts = {0, len(words)}
    for i, word in enumerate(words.words):
        if word.startswith(("(", "[")):
            cuts.add(i)
        if word.rstrip(".").endswith((")", "]")) or word.endswith((",", ";", ":")):
            cuts.add(i + 1)
        if i and sp._core(word) in _CLAUSE_WORDS:
            cuts.add(i)
    ordered = sorted(c for c in cuts if c <= len(words))
    return [(a, b) for a, b in zip(ordered, ordered[1:]) if b > a]


def _chars(words: sp._Words, lo: int, hi: int) -> tuple[int, int]:
    return words.spans[lo][0], words.spans[hi - 1][1]


def labels_refs(question: str, text: str) -> tuple[int, int]:
    words = sp._Words(question, text)
    lo, hi = sp._without_labels(words), len(words)
    while lo < hi - 1 and words.reference[lo]:
        lo += 1
    while hi > lo + 1 and (words.reference[hi - 1] or not sp._core(words.words[hi - 1])):
        hi -= 1
    return _chars(words, lo, hi)


def trim(question: str, text: str) -> tuple[int, int]:
    return sp.answer_span(question, text, quantities=False)


def part(question: str, text: str) -> tuple[int, int]:
    return sp.answer_span(question, text)


def _anchor(words: sp._Words, cl: list[tuple[int, int]]) -> int | None:
    asked = [sum(k == "asked" for k in words.kinds[a:b]) for a, b in cl]
    return max(range(len(cl)), key=lambda j: asked[j]) if max(asked, default=0) else None


def anchor_onward(question: str, text: str) -> tuple[int, int]:
    words = sp._Words(question, text)
    cl = clauses(words)
    i = _anchor(words, cl)
    if i is None:
        return trim(question, text)
    lo, hi = sp.trimmed(words, cl[i][0], len(words))
    if words.content(lo, hi) < 4:
        lo, hi = sp.trimmed(words, 0, len(words))
    return _chars(words, lo, hi)


def anchor_clause(question: str, text: str) -> tuple[int, int]:
    words = sp._Words(question, text)
    cl = clauses(words)
    i = _anchor(words, cl)
    if i is None:
        return trim(question, text)
    first = last = i
    lo, hi = sp.trimmed(words, cl[first][0], cl[last][1])
    while words.content(lo, hi) < 4 and (first > 0 or last + 1 < len(cl)):
        if last + 1 < len(cl):
            last += 1
        else:
            first -= 1
        lo, hi = sp.trimmed(words, cl[first][0], cl[last][1])
    return _chars(words, lo, hi)


VARIANTS: dict[str, Variant] = {
    "sentence": lambda q, t: (0, len(t)), "labels+refs": labels_refs, "trim": trim, "part (shipped)": part,
    "anchor onward": anchor_onward, "anchor clause": anchor_clause,
}


def stated(evidence: Evidence, question: str, variant: Variant) -> tuple[str, int, int]:
    """The answer text the service would show for ``variant``'s part of ``evidence``, and the part's document span."""
    s, e = variant(question, evidence.text)
    piece = replace(evidence, start=evidence.start + s, end=evidence.start + e, text=evidence.text[s:e])
    text, citations = compose([piece], [0])
    return m.strip_markers(text), citations[0].start, citations[0].end


def covidqa(args: argparse.Namespace) -> None:
    bench = load_qa(args.folder)
    pool = half(bench.questions, args.half)
    questions = sample(pool, args.sample or None, args.seed)
    if args.rest:  # the questions of the half that the sample left out
        chosen = {q.qid for q in questions}
        questions = [q for q in pool if q.qid not in chosen]
    settings = Settings(index_dir=Path(".citerag-bench") / bench.name, corpus=[bench.corpus])
    retriever = open_retriever(settings, ensure_index(index_setup(settings), show_progress=False))
    encode = load_embedder(settings).encode
    sums: dict[str, dict[str, float]] = {name: {"f1": 0, "hit": 0, "recall": 0, "words": 0, "f1_hit": 0}
                                         for name in VARIANTS}
    oracle = {"best sentence of the top-k": 0.0, "best clause of the top-k": 0.0,
              "best clause run of the top-k": 0.0, "best clause of the top-1 sentence": 0.0,
              "best clause run of the top-1 sentence": 0.0}
    sentence_hits = 0
    for q in questions:
        passages = merge_same_document(retriever.search(q.question, k=args.k, mode="hybrid"))
        evidence = select_evidence(q.question, passages, encode, keep=10_000)
        golds, spans = [a[0] for a in q.answers], [(a[1], a[2]) for a in q.answers]
        if not evidence:
            continue
        top = evidence[0]
        whole_hit = m.span_hit([(top.doc_id, top.start, top.end)], q.doc_id, spans)
        sentence_hits += whole_hit
        for name, variant in VARIANTS.items():
            text, start, end = stated(top, q.question, variant)
            f1 = m.token_f1(text, golds)
            row = sums[name]
            row["f1"] += f1
            row["hit"] += m.span_hit([(top.doc_id, start, end)], q.doc_id, spans)
            row["recall"] += m.gold_recall(text, golds)
            row["words"] += len(text.split())
            row["f1_hit"] += f1 if whole_hit else 0.0
        best = {key: 0.0 for key in oracle}
        for rank, item in enumerate(evidence):
            words = sp._Words(q.question, item.text)
            if not words.spans:
                continue
            best["best sentence of the top-k"] = max(best["best sentence of the top-k"], m.token_f1(
                stated(item, q.question, VARIANTS["sentence"])[0], golds))
            cl = clauses(words)
            for x in range(len(cl)):
                for y in range(x, len(cl)):
                    s, e = _chars(words, cl[x][0], cl[y][1])
                    f1 = m.token_f1(stated(item, q.question, lambda _q, _t, s=s, e=e: (s, e))[0], golds)
                    keys = ["best clause run of the top-k"] + (["best clause of the top-k"] if x == y else [])
                    if rank == 0:
                        keys += ["best clause run of the top-1 sentence"]
                        keys += ["best clause of the top-1 sentence"] if x == y else []
                    for key in keys:
                        best[key] = max(best[key], f1)
        for key in oracle:
            oracle[key] += best[key]
    n = len(questions)
    which = f"the {n} questions outside the sample of {args.sample}" if args.rest else f"{n} questions"
    print(f"COVID-QA {args.half} half, {which} (seed {args.seed}), k = {args.k}; the whole top-1 sentence "
          f"hits the gold span for {sentence_hits}\n")
    print("| answer | F1 | span hit | gold-token recall | words | F1 where the sentence hits |")
    print("|---|---:|---:|---:|---:|---:|")
    for name, row in sums.items():
        print(f"| {name} | {row['f1'] / n:.3f} | {row['hit'] / n:.3f} | {row['recall'] / n:.3f} | "
              f"{row['words'] / n:.1f} | {row['f1_hit'] / max(1, sentence_hits):.3f} |")
    for key, total in oracle.items():
        print(f"| oracle: {key} | {total / n:.3f} | | | | |")


def devset(args: argparse.Namespace) -> None:
    """Expected strings kept: for each dev question with expected strings, the top sentence of its gold papers."""
    rows = [json.loads(line) for line in args.devset.read_text(encoding="utf-8").splitlines() if line.strip()]
    rows = [r for r in half([_Q(r) for r in rows], args.half) if r.row.get("answer")]
    wanted = {doc for r in rows for doc in r.row.get("qrels", {})}
    documents = _documents(args.corpus, wanted)
    encode = load_embedder(Settings()).encode
    counts = {"in sentence": 0, "in part": 0, "lost": 0, "questions": 0}
    words: dict[str, list[int]] = {"sentence": [], "part": []}
    for r in rows:
        passages = [_whole(documents[d], rank) for rank, d in enumerate(r.row["qrels"], start=1) if d in documents]
        evidence = select_evidence(r.row["question"], passages, encode, keep=1)
        if not evidence:
            continue
        counts["questions"] += 1
        sentence = stated(evidence[0], r.row["question"], VARIANTS["sentence"])[0]
        piece = stated(evidence[0], r.row["question"], part)[0]
        words["sentence"].append(len(sentence.split()))
        words["part"].append(len(piece.split()))
        expected = [normalise(a) for a in r.row["answer"]]
        if any(a in normalise(sentence) for a in expected):
            counts["in sentence"] += 1
            if any(a in normalise(piece) for a in expected):
                counts["in part"] += 1
            else:
                counts["lost"] += 1
                print(f"lost {r.qid}: {r.row['question']!r} -> {piece!r}")
    print(json.dumps({**counts, "median words": {k: statistics.median(v) for k, v in words.items() if v}}))


class _Q:
    def __init__(self, row: dict) -> None:
        self.row, self.qid = row, row["qid"]


def _documents(corpus: Path, wanted: set[str]) -> dict[str, Document]:
    if corpus.name.endswith(".jsonl.gz"):  # the 22,981 ML abstracts: read only the gold ones
        out = {}
        with gzip.open(corpus, "rt", encoding="utf-8") as handle:
            for line in handle:
                row = json.loads(line)
                if row["_id"] in wanted:
                    out[row["_id"]] = Document(row["_id"], row.get("title", ""), row["text"], row.get("title", ""))
        return out
    return {d.doc_id: d for d in read_corpus([corpus]).documents if d.doc_id in wanted}


def _whole(document: Document, rank: int) -> SearchResult:
    passage = Passage(f"{document.doc_id}#0", document.doc_id, 0, 0, len(document.text), document.text, 0)
    return SearchResult(rank, passage, document, 1.0, rank, rank, 1.0, 1.0)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("folder", type=Path, nargs="?")
    parser.add_argument("--half", default="dev")
    parser.add_argument("--sample", type=int, default=300)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--k", type=int, default=8)
    parser.add_argument("--rest", action="store_true", help="the half's questions outside the sample instead")
    parser.add_argument("--devset", type=Path)
    parser.add_argument("--corpus", type=Path, default=Path("data"))
    args = parser.parse_args()
    if args.half == "test":
        parser.error("this table is for choosing the design: dev half only")
    devset(args) if args.devset else covidqa(args)


if __name__ == "__main__":
    main()
