"""Generate "What does X stand for?" questions over the ML abstracts (``eval/ml_abbreviations.jsonl``), a check of
abbreviation questions that no one wrote with the service's answers in view.

An abbreviation qualifies when it has three or more capitals, exactly one abstract defines it (the long form found by
:func:`~citerag.service.answering.names.long_form`, Schwartz & Hearst 2003) and no other abstract mentions it, and
its long form is clean text (no PDF-extraction debris such as ``(cid:173)`` or a line-break hyphen "Contin- uous",
and no abbreviation inside it: "multi-class CSSPs"); Markdown and LaTeX marks are taken out of it. Of the qualifying abbreviations, 400 are sampled (``random.Random(seed)``); the
first ``n`` that pass every test are written, in sample order.

Usage: ``python eval/make_abbreviation_questions.py [corpus.jsonl.gz] [out.jsonl] [n] [seed]``.
"""

from __future__ import annotations

import gzip
import json
import random
import re
import sys
from collections import defaultdict
from pathlib import Path

from citerag.service.answering.names import long_form

_CANDIDATE = re.compile(r"\(([A-Z][A-Za-z0-9-]{2,9})\)")
_DEBRIS = re.compile(r"\(cid:|\w- \w")
_MARKUP = re.compile(r"[*_{}$\\]")
_ABBREVIATION = re.compile(r"\b[A-Z]{2,}s?\b")
SAMPLE = 400


def questions(documents: list[dict[str, str]], n: int = 21, seed: int = 0) -> list[dict[str, object]]:
    """The abbreviation questions (module docstring) over ``documents`` (``_id`` and ``text`` each), as dev-set rows
    (``qid`` a001..., ``kind`` "definition", ``qrels`` the defining abstract, ``answer`` its long form)."""
    defined: dict[str, list[tuple[str, str]]] = defaultdict(list)
    for document in documents:
        for match in _CANDIDATE.finditer(document["text"]):
            short = match.group(1)
            if sum(c.isupper() for c in short) >= 3 and (found := long_form(short, document["text"])):
                defined[short].append((document["_id"], found))
    once = sorted(short for short, where in defined.items() if len(where) == 1)
    sample = random.Random(seed).sample(once, min(SAMPLE, len(once)))
    patterns = {short: re.compile(rf"(?<![\w-]){re.escape(short)}(?![\w-])") for short in sample}
    mentions: dict[str, int] = defaultdict(int)
    for document in documents:
        for short, pattern in patterns.items():
            mentions[short] += bool(pattern.search(document["text"]))
    rows: list[dict[str, object]] = []
    for short in sample:
        doc_id, found = defined[short][0]
        found = _MARKUP.sub("", found).strip()
        if mentions[short] != 1 or _DEBRIS.search(found) or _ABBREVIATION.search(found):
            continue
        rows.append({"qid": f"a{len(rows) + 1:03d}", "question": f"What does {short} stand for?",
                     "kind": "definition", "qrels": {doc_id: 2}, "answer": [found]})
        if len(rows) == n:
            break
    return rows


def main(argv: list[str]) -> None:
    corpus = Path(argv[0] if argv else "../shared/corpora/ml_abstracts.jsonl.gz")
    out = Path(argv[1] if len(argv) > 1 else "eval/ml_abbreviations.jsonl")
    n, seed = (int(argv[2]) if len(argv) > 2 else 21), (int(argv[3]) if len(argv) > 3 else 0)
    with gzip.open(corpus, "rt", encoding="utf-8") as handle:
        documents = [json.loads(line) for line in handle]
    rows = questions(documents, n, seed)
    out.write_text("".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows), encoding="utf-8")
    print(f"{len(rows)} questions -> {out}")


if __name__ == "__main__":
    main(sys.argv[1:])
