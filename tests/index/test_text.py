from __future__ import annotations

from citerag.index.text import display_label, fold, split_sentences


class TestFold:
    def test_latex_markdown_and_unicode(self) -> None:
        assert fold(r"\textbf{Fast} $\mathcal{O}(\log(N))$ for **V₁**") == "Fast O(log(N)) for V1"
        assert fold(r"see \href{https://x.org}{our code} and \emph{this}") == "see our code and this"
        assert fold("80\\% of ﬁles\n\n  here") == "80% of files here"


class TestSentences:
    def test_spans_cover_sentences_and_skip_abbreviations(self) -> None:
        text = "We build on Gibbs et al. (2025). It is fast, e.g. 40-fold. Done!  "
        spans = split_sentences(text)
        assert [text[s:e] for s, e in spans] == ["We build on Gibbs et al. (2025).", "It is fast, e.g. 40-fold.", "Done!"]

    def test_blank_text_has_no_sentences(self) -> None:
        assert split_sentences("   ") == []


def test_label_is_a_prefix_of_the_first_sentence() -> None:
    text = "A " + "very " * 40 + "long first sentence. Second."
    label = display_label(text)
    assert label.endswith("…") and len(label) <= 91
    assert fold(text).startswith(label[:-1])
    assert display_label("Short one. Next.") == "Short one."
