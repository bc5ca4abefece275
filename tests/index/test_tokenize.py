from __future__ import annotations

import pytest

from citerag.index.tokenize import tokenize


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
        assert tokenize("Café naïve 论文") == ["cafe", "naiv", "论文"]


class TestScripts:
    """Every script is split into words a query in that script can meet (regressions: before tokenizer version 2
    a Chinese sentence was one token, "naïve" never met "naive", and Devanagari words fell apart at vowel signs)."""

    @pytest.mark.parametrize(
        ("accented", "plain"),
        [("naïve", "naive"), ("Café", "cafe"), ("Ἀθῆναι", "αθηναι"), ("μοντέλο", "ΜΟΝΤΕΛΟ"), ("Straße", "strasse"),
         ("كَتَبَ", "كتب"), ("Ёлка", "елка")],
    )
    def test_case_and_diacritics_are_folded(self, accented: str, plain: str) -> None:
        assert tokenize(accented) == tokenize(plain) and len(tokenize(plain)) == 1

    def test_chinese_japanese_korean_runs_become_overlapping_bigrams(self) -> None:
        assert tokenize("大型语言模型") == ["大型", "型语", "语言", "言模", "模型"]
        assert tokenize("データ分析") == ["デー", "ータ", "タ分", "分析"]  # ー belongs to the katakana run
        assert tokenize("모델은") == ["모델", "델은"]
        assert tokenize("年") == ["年"]  # a lone character is a unigram
        assert set(tokenize("检索增强")) <= set(tokenize("大型语言模型的检索增强生成方法"))

    def test_a_cjk_run_never_joins_a_latin_word(self) -> None:
        assert tokenize("使用GPT-4模型") == ["使用", "gpt4", "gpt", "4", "模型"]

    @pytest.mark.parametrize(
        ("text", "tokens"),
        [("हिन्दी भाषा", ["हिन्दी", "भाषा"]), ("Большая языковая модель", ["большая", "языковая", "модель"]),
         ("نموذج لغوي", ["نموذج", "لغوي"]), ("Ένα μεγάλο μοντέλο", ["ενα", "μεγαλο", "μοντελο"])],
    )
    def test_words_keep_their_combining_marks(self, text: str, tokens: list[str]) -> None:
        assert tokenize(text) == tokens
