"""Folding and tokenising give exactly what they gave before their fast paths (issue 19: the fixed Python cost per
search): ``_old_fold`` and ``_old_tokenize`` are frozen copies of the code as it was (every markup pass always run,
each compound matched, split and stemmed one by one), kept here as the reference.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from citerag.index import text as text_module
from citerag.index import tokenize as tok
from citerag.index.ingest import load_documents
from citerag.index.text import fold
from tests.conftest import SCRIPTS, SEEDS

def _old_fold(text: str) -> str:
    t = text_module
    out = t._HREF.sub(r"\1", text)
    for _ in range(3):
        unwrapped = t._CMD_WITH_ARG.sub(r"\1", out)
        if unwrapped == out:
            break
        out = unwrapped
    out = t._ESCAPED.sub(r"\1", out)
    out = t._BARE_CMD.sub(r"\1", out)
    out = t._MARKUP.sub("", out)
    out = t.unicodedata.normalize("NFKC", out)
    return t._SPACES.sub(" ", out).strip()


def _old_normalize(text: str) -> str:
    out = _old_fold(text).casefold()
    if out.isascii():
        return out
    out = tok.unicodedata.normalize("NFC", tok._DIACRITICS.sub("", tok.unicodedata.normalize("NFD", out)))
    return " ".join(tok._CJK_RUN.sub(lambda m: f" {m.group()} ", out).split())


def _old_tokenize(text: str) -> list[str]:
    tokens: list[str] = []
    for match in tok._COMPOUND.finditer(_old_normalize(text)):
        compound = match.group()
        if tok._CJK_RUN.fullmatch(compound):
            tokens.extend(tok._bigrams(compound))
            continue
        parts = tok._PART.findall(compound)
        if len(parts) > 1:
            tokens.append(tok._stem("".join(parts)))
        tokens.extend(tok._stem(part) for part in parts if part not in tok.STOPWORDS)
    return tokens


QUERIES = [
    "retrieval augmented generation with citations",
    "GP-EquiFlow equivariant flows",
    r"$\mathcal{O}(\log(N))$ regret bound for \emph{bandits}",
    "KV cache compression for long-context LLM inference",
    "naïve Bayes résumé",
    "learning learning learning",  # a repeated term counts each time
    "zzzunknownword qqqq",  # no BM25 term: the dense side alone
    "the of and",  # stop words only
    "检索增强 模型",
    "ΜΟΝΤΕΛΟ ανακτηση",
    "V₁ speed-up — 40-fold",
]

TEXTS = st.text(st.characters(exclude_categories=("Cs",)), max_size=300)
MARKUP = st.sampled_from([r"\textbf{x}", "$a_1$", "**b**", "__c__", "`d`", r"\href{u}{e}", "{f}", r"\%", "＄", "＼x",
                          "GP-EquiFlow", "naïve", "检索增强", "–", "ﬁ", "V₁", " \t\n"])


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(TEXTS, MARKUP), max_size=12).map("".join))
def test_fold_and_tokenize_are_unchanged(text: str) -> None:
    assert fold(text) == _old_fold(text)
    assert tok.tokenize(text) == _old_tokenize(text)
    assert tok.tokenize_folded(fold(text)) == _old_tokenize(text)


def test_tokenize_is_unchanged_on_the_corpus_and_the_scripts() -> None:
    texts = [d.text for d in load_documents([SEEDS])] + [s for pair in SCRIPTS.values() for s in pair] + QUERIES
    for text in texts:
        assert tok.tokenize(text) == _old_tokenize(text), text
