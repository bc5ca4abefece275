"""What an unnamed paper is about: the topic phrase an answer calls it by ("The paper on data assimilation performs
..."), where a paper has neither a title nor a coined name (:func:`~citerag.service.answering.names.paper_label` is
``None``) and the answer would otherwise say "One paper" (an answer about several papers) or "The paper" (one that
picks a paper: "Which of the two ...?").

The model writes the phrase (a short noun phrase is writing, what a small model does well) from the abstract's
opening (:data:`OPENING_SENTENCES`), and the service checks it against the abstract (:func:`checked_topic`): each
content word of the phrase must be a word of the abstract (or a generic research noun), so a phrase cannot say what
the paper does not. A phrase that fails is not used (the answer says "One paper", as before). Each abstract is
described once: the phrase (or its failure) is kept in memory and on disk (``<cache_dir>/topics/``), keyed by the
model file, the prompt and the abstract's exact text (:func:`~citerag.index.embed_cache.cache_key`).

Measured on 40 ML abstracts that have titles, read without them (eval/results/qa.md, fourteenth round): 0.85 of
the phrases pass the check, and a phrase shares 0.61 of its content terms with the paper's own title (asked "what
is this abstract about?": 0.56; a contiguous keyphrase of the abstract ranked by the encoder, KeyBERT-style,
Grootendorst 2020: 0.53 over 300 abstracts, but it reads as fragments: "recognize context-free languages"), about
1.8 s each on 2 cores, once per abstract.
"""

from __future__ import annotations

import logging
import re
from pathlib import Path

from citerag.index.embed_cache import cache_key
from citerag.index.files import atomic_write_bytes
from citerag.index.text import readable, split_sentences
from citerag.index.tokenize import tokenize
from citerag.index.types import Document
from citerag.service.answering.language import FUNCTION_WORDS, RESEARCH_NOUNS
from citerag.service.answering.prompts import DECISION_SLOT, topic_messages
from citerag.service.generator import Generator

log = logging.getLogger(__name__)

#: The abstract's first sentences the model reads: an abstract opens with its field and problem.
OPENING_SENTENCES = 2
#: The opening is cut to this many characters (an abstract without full stops, a long first sentence): ~150 tokens.
MAX_OPENING_CHARS = 600
#: The model's token limit for the phrase (six words are ~8-12 tokens).
TOPIC_TOKENS = 16
#: A label has this many words at least and at most: one word ("Transformers") does not tell a paper from others
#: of its field, and a longer phrase is a sentence.
MIN_TOPIC_WORDS, MAX_TOPIC_WORDS = 2, 8
_GENERIC_TERMS = frozenset(tokenize(" ".join(RESEARCH_NOUNS)))
_LEAD = re.compile(r"^(?:topic|answer|the (?:paper|abstract) is about)\s*:?\s*", re.IGNORECASE)


def opening(text: str, sentences: int = OPENING_SENTENCES) -> str:
    """The first ``sentences`` sentences of ``text``, readable (:func:`~citerag.index.text.readable`), at most
    :data:`MAX_OPENING_CHARS` characters (cut at a word boundary).

    >>> opening("Data assimilation (DA) tackles $x$. We study DA. We perform SMC.")
    'Data assimilation (DA) tackles x. We study DA.'
    >>> len(opening("word " * 1000)) <= MAX_OPENING_CHARS
    True
    """
    text = readable(text)
    first = " ".join(text[start:end] for start, end in split_sentences(text)[:sentences])
    return first if len(first) <= MAX_OPENING_CHARS else first[:MAX_OPENING_CHARS].rsplit(" ", 1)[0]


def checked_topic(phrase: str, text: str) -> str | None:
    """``phrase`` (the model's output) as a label for the abstract ``text``, or ``None`` when it is not one: one
    line, quotes, a lead-in ("Topic:") and a closing full stop removed; :data:`MIN_TOPIC_WORDS` to
    :data:`MAX_TOPIC_WORDS` words; every content term (BM25 token) a term of ``text`` or a generic research noun
    ("model", "framework"). Each word the model capitalised as in a title is written as ``text`` writes it
    (:func:`as_written`), so that the phrase reads inside a sentence.

    >>> text = "Data assimilation (DA) estimates latent states from noisy observational data with diffusion models."
    >>> checked_topic('"Data assimilation with diffusion models."', text)
    'data assimilation with diffusion models'
    >>> checked_topic("Weather forecasting with diffusion models", text) is None  # "weather" is not in the text
    True
    >>> checked_topic("Assimilation", text) is None  # one word
    True
    >>> checked_topic("Mixture of Experts Routing", "Mixture of Experts (MoE) is costly. We study MoE routing.")
    'Mixture of Experts routing'
    """
    lines = [line for line in phrase.strip().splitlines() if line.strip()]
    if not lines:
        return None
    label = _LEAD.sub("", lines[0].strip().strip("\"'“”‘’*")).strip().rstrip(".").strip("\"'“”‘’* ")
    words = label.split()
    terms = set(tokenize(label))
    if not MIN_TOPIC_WORDS <= len(words) <= MAX_TOPIC_WORDS or not terms - _GENERIC_TERMS \
            or not terms <= set(tokenize(text)) | _GENERIC_TERMS or "[" in label:
        return None
    text = readable(text)
    written: list[str] = []
    for word in reversed(words):  # a capital word before a name's kept capital (over "of") is part of the name
        after = next((w for w in written if w.lower() not in FUNCTION_WORDS), "")
        named = after[:1].isupper() and word[:1].isupper() and re.search(rf"(?<![\w-]){re.escape(word)}", text)
        written.insert(0, word if named else as_written(word, text))
    return " ".join(written)


def as_written(word: str, text: str) -> str:
    """``word`` as ``text`` writes it: a capitalised word (``Prediction``, ``Rank-aware``) in lower case unless
    ``text`` capitalises it inside a sentence (a name: "Large Language Models", "Gibbs"); a capital at a sentence's
    start, or in a title, says nothing. Any other word (``LLM``, ``mSGD``) as it is.

    >>> text = "Conformal prediction is fast. We study Large Language Models for conformal prediction."
    >>> [as_written(w, text) for w in ("Conformal", "Prediction", "Language", "LLM", "For", "Cats")]
    ['conformal', 'prediction', 'Language', 'LLM', 'for', 'cats']
    """
    if not re.fullmatch(r"[A-Z][a-z]+(?:-[a-z]+)*", word):
        return word
    capitalised = (m.start() for m in re.finditer(rf"(?<![\w-]){re.escape(word)}(?![\w-])", text))
    inside = any(re.search(r"\w[^.!?]*$", text[max(0, at - 200):at]) for at in capitalised)
    return word if inside else word.lower()


class Topics:
    """The topic phrase of an unnamed paper (module docstring), written by the model once per abstract.

    Args:
        generator: the loaded chat model; the phrase is written in its yes/no slot (:data:`~citerag.service.
            answering.prompts.DECISION_SLOT`), whose cached system prompt it shares.
        cache_dir: where phrases are kept on disk (``<cache_dir>/<key>.txt``; an empty file: no phrase); ``None``:
            in memory only.
    """

    def __init__(self, generator: Generator, cache_dir: Path | None = None) -> None:
        self.generator = generator
        self.cache_dir = cache_dir
        self._model = f"{generator.model_path.name}\x00{topic_messages('')}"
        self._known: dict[bytes, str | None] = {}

    def __call__(self, document: Document) -> str | None:
        """The topic phrase of ``document`` (its abstract's opening, checked by :func:`checked_topic`), or
        ``None``."""
        key = cache_key(self._model, document.text)
        if key in self._known:
            return self._known[key]
        path = self.cache_dir / f"{key.hex()}.txt" if self.cache_dir is not None else None
        if path is not None and path.is_file():
            stored = path.read_text(encoding="utf-8")
            self._known[key] = stored or None
            return stored or None
        completion = self.generator.chat(topic_messages(opening(document.text)), TOPIC_TOKENS, slot=DECISION_SLOT,
                                         fixed=1)
        topic = checked_topic(completion.text, document.text)
        self._known[key] = topic
        if path is not None:
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
                atomic_write_bytes(path, (topic or "").encode("utf-8"))
            except OSError as error:  # a read-only cache costs a phrase per process, not the answer
                log.warning("cannot keep the topic of %s in %s: %s", document.doc_id, path.parent, error)
        return topic
