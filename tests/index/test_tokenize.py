from __future__ import annotations

import pytest

from index.tokenize import tokenize


class TestTokenize:
    def test_unicode_subscript_meets_ascii(self) -> None:
        assert tokenize("V₁") == tokenize("V1") == tokenize("**V₁**") == ["v1"]

    @pytest.mark.parametrize(
        ("term", "whole", "parts"),
        [("GP-EquiFlow", "gpequiflow", ["gp", "equiflow"]), ("LU-KV", "lukv", ["lu", "kv"]), ("XR-1", "xr1", ["xr", "1"])],
    )
    def test_hyphenated_terms_give_whole_and_parts(self, term: str, whole: str, parts: list[str]) -> None:
        assert tokenize(term) == [whole, *parts]
        assert whole in tokenize(f"we propose {term}, a method")

    def test_stemming_stop_words_and_case(self) -> None:
        assert tokenize("The Models are Training") == ["model", "train"]  # Lucene English stop words

    def test_latex_is_folded(self) -> None:
        assert tokenize(r"reduces KV cache size by 80\% with \textbf{minimal} loss") == [
            "reduc", "kv", "cach", "size", "80", "minim", "loss",
        ]

    def test_non_latin_and_accented_text(self) -> None:
        assert tokenize("Café naïve 论文") == ["café", "naïv", "论文"]
