"""Naming a sentence's subject: an abstract says "We propose ...", "Our method ...", "This enables ...", "It ...";
an answer says who. :func:`name_subject` replaces such an opening with the paper's label and makes the verb agree
with it ("We propose X" -> "LU-KV proposes X"; "Our results show" -> "LU-KV's results show"; "In this work, we
present EDEN, a family of ..." -> "EDEN is a family of ...").

The first person left inside a sentence is the paper's too (:func:`third_person_inside`): "..., we identify ..." ->
"..., the authors identify ...", "in our evaluation" -> "in the paper's evaluation".

English grammar only (pronouns, possessives, third-person singular agreement); no word of any paper.
"""

from __future__ import annotations

import re

from citerag.service.answering.language import (
    CLAUSE_LEAD,
    FUNCTION_WORDS,
    INTRODUCING_VERBS,
    RESEARCH_NOUNS,
    STOCK_LEAD,
)

#: Irregular third-person singular forms.
_IRREGULAR = {"have": "has", "are": "is", "were": "was", "do": "does", "go": "goes", "be": "is"}
#: Forms that agree with any subject: modals and common irregular past tenses.
_INVARIANT = frozenset(
    """can could may might must shall should will would cannot found made built took gave saw ran wrote held kept
    led brought thought got set put cut had did was showed""".split()
)
_ADVERB = re.compile(r"^(?:\w+ly|also|too|further|then|first|next|now|here|additionally|moreover|finally|thus|"
                     r"therefore|still|again|even|instead|often|always|never|already)$", re.IGNORECASE)
_LEAD = re.compile(
    rf"^\s*(?:{STOCK_LEAD}|specifically,?\s+|finally,?\s+|moreover,?\s+|in addition,?\s+"
    rf"|{CLAUSE_LEAD}(?=(?:we|our|this|these|it|its|they|their)\b))",
    re.IGNORECASE,
)
# The verb that introduces a coined name, and its article, at the start of what follows "We".
_INTRODUCING = rf"^(?:{INTRODUCING_VERBS})(?:es|s)?\s+(?:(?:a|an|the)\s+)?"
# An appositive after the name: ", a family of ...".
_APPOSITIVE = r"\s*,\s+(?P<appositive>(?:a|an|the)\s+.+)$"
# "we present EDEN, a family of ..." -> the coined name and its appositive: "EDEN is a family of ...".
_INTRODUCES = re.compile(rf"{_INTRODUCING}(?P<name>[^\s,(]+)(?P<long>\s*\([^)]*\))?{_APPOSITIVE}", re.IGNORECASE)
# "we introduce Divergence Decoding (DD), a mechanism ..." -> "Divergence Decoding (DD) is a mechanism ...".
_INTRODUCES_LONG = re.compile(rf"{_INTRODUCING}(?P<long>[A-Z][^,()]{{2,80}}?)\s+\((?P<name>[^)\s]+)\){_APPOSITIVE}")


def third_person(verb: str) -> str:
    """The third-person singular of a base-form verb: ``propose`` -> ``proposes``, ``reach`` -> ``reaches``,
    ``apply`` -> ``applies``, ``have`` -> ``has``, ``focus`` -> ``focuses``; modals, past tenses and other forms
    already ending in ``s`` unchanged.

    >>> [third_person(v) for v in ["propose", "reach", "apply", "have", "can", "achieved", "shows", "focus", "assess"]]
    ['proposes', 'reaches', 'applies', 'has', 'can', 'achieved', 'shows', 'focuses', 'assesses']
    >>> third_person("re-annotate"), third_person("fine-tune")
    ('re-annotates', 'fine-tunes')
    """
    head, hyphen, last = verb.rpartition("-")
    if hyphen and head and last.isalpha():  # "re-annotate" -> "re-annotates"
        return f"{head}-{third_person(last)}"
    lower = verb.lower()
    if lower in _IRREGULAR:
        return _IRREGULAR[lower]
    if lower.endswith(("ss", "us")) and lower.isalpha():  # a base form: "we focus", "we address"
        return verb + "es"
    if lower in _INVARIANT or lower.endswith(("ed", "s")) or not lower.isalpha():
        return verb
    if lower.endswith(("sh", "ch", "x", "z", "o")):
        return verb + "es"
    if len(lower) > 2 and lower.endswith("y") and lower[-2] not in "aeiou":
        return verb[:-1] + "ies"
    return verb + "s"


#: First-person pronouns after a sentence's first word, and what an answer says instead (the authors' plural needs
#: no change of verb: "we identify" -> "the authors identify"). "US" (the country) is not "us".
_FIRST_PERSON_INSIDE = re.compile(r"(?<=\S)(?P<space>\s+)(?P<word>[Ww]e|[Oo]ur|us)\b(?!['’-])")
_THIRD_PERSON = {"we": "the authors", "our": "the paper's", "us": "the authors"}


def third_person_inside(sentence: str) -> str:
    """``sentence`` with the first-person pronouns after its first word in the third person: the abstract's
    authors speak in it, an answer speaks of them.

    >>> third_person_inside("While prior work studied sparsity, we identify neuron-level sparsity in our models.")
    "While prior work studied sparsity, the authors identify neuron-level sparsity in the paper's models."
    >>> third_person_inside("HELIX lets us beat 16 baselines in the US.")
    'HELIX lets the authors beat 16 baselines in the US.'
    """
    return _FIRST_PERSON_INSIDE.sub(lambda m: m.group("space") + _THIRD_PERSON[m.group("word").lower()], sentence)


def _agree(rest: str) -> str:
    """``rest`` (the words after a plural pronoun subject) with its verb made third-person singular, past one
    adverb ("further show" -> "further shows")."""
    words = rest.split(" ")
    i = 0
    while i < len(words) - 1 and _ADVERB.match(words[i]):
        i += 1
    if words and words[i]:
        core = words[i].rstrip(",;:")  # "we empirically demonstrate, for the first time, ..."
        words[i] = third_person(core) + words[i][len(core):]
    return " ".join(words)


#: Irregular past participles (the regular ones add "-ed").
_PARTICIPLE = {"show": "shown", "build": "built", "make": "made", "find": "found", "give": "given", "take": "taken",
               "run": "run", "write": "written", "keep": "kept", "hold": "held", "bring": "brought", "set": "set",
               "put": "put", "cut": "cut", "teach": "taught", "feed": "fed", "choose": "chosen", "draw": "drawn"}


def participle(verb: str) -> str:
    """The past participle of a base-form or regular past-tense verb: ``validate`` -> ``validated``, ``apply`` ->
    ``applied``, ``train`` -> ``trained``, ``show`` -> ``shown``.

    >>> [participle(v) for v in ["validate", "apply", "train", "show", "evaluated", "stop", "map", "add"]]
    ['validated', 'applied', 'trained', 'shown', 'evaluated', 'stopped', 'mapped', 'added']
    """
    lower = verb.lower()
    if lower in _PARTICIPLE:
        return _PARTICIPLE[lower]
    if lower.endswith("ed"):
        return verb
    if lower.endswith("e"):
        return verb + "d"
    if len(lower) > 2 and lower.endswith("y") and lower[-2] not in "aeiou":
        return verb[:-1] + "ied"
    if len(lower) in (3, 4) and lower[-1] not in "aeiouwxy" and lower[-2] in "aeiou" and lower[-3] not in "aeiou":
        return verb + verb[-1] + "ed"  # one-syllable consonant-vowel-consonant: stop -> stopped
    return verb + "ed"


#: Reporting verbs: "it is shown that X" is the paper showing X ("the paper shows that X"), not a thing called
#: "it" (the dummy subject of a passive report).
_REPORTING_VERBS = ("show", "demonstrate", "prove", "find", "establish", "observe", "confirm", "verify", "argue")
#: Each reporting verb's past participle, and the verb as the paper's own ("proven" beside "proved").
_REPORTING = {participle(verb): third_person(verb) for verb in _REPORTING_VERBS} | {"proven": "proves"}
_REPORTED = re.compile(rf"^it\s+(?:is|was|has\s+been)\s+(?:\w+ly\s+)?(?P<verb>{'|'.join(_REPORTING)})\s+that\s+"
                       r"(?P<clause>.+)$", re.IGNORECASE | re.DOTALL)


def passive(tail: str, label: str) -> str | None:
    """"We <verb> <label> ..." turned round so that the label is the subject: ``tail`` is what follows "We"
    ("validate XR-1 through 12,000 rollouts" -> "XR-1 is validated through 12,000 rollouts"); ``None`` when
    ``tail``'s verb (after any adverbs) is not directly followed by ``label``, or is a modal or auxiliary, or
    another clause follows the label ("we propose X, which adds Y" reads "X adds Y"), or the label modifies the
    noun after it; "the" before the label stays ("we introduce the X to ..." -> "The X is introduced to ...").

    >>> passive("validate XR-1 through 12,000 rollouts", "XR-1"), passive("evaluated EDEN on 9 tasks", "EDEN")
    ('XR-1 is validated through 12,000 rollouts', 'EDEN was evaluated on 9 tasks')
    >>> passive("propose CFlower, which adds a loss", "CFlower"), passive("train XR-1, then tune it", "XR-1")
    ('CFlower adds a loss', None)
    >>> passive("propose a method", "XR-1") is None, passive("can train XR-1 fast", "XR-1") is None
    (True, True)
    >>> passive("introduce the Platonic Transformer to resolve it", "Platonic Transformer")
    'The Platonic Transformer is introduced to resolve it'
    >>> passive("develop the SV2P method that predicts", "SV2P") is None  # the label modifies "method"
    True
    """
    match = re.match(rf"(?P<adverbs>(?:\w+ly\s+)*)(?P<verb>[a-z]+)\s+(?P<article>the\s+)?"
                     rf"{re.escape(label)}(?![\w-])\s*(?P<rest>.*)$", tail, re.DOTALL)
    if match is None or match.group("verb") in _INVARIANT or match.group("verb") in _IRREGULAR:
        return None
    following = re.match(r"[^\W\d_]+", match.group("rest"))
    if following and following.group(0).lower() not in FUNCTION_WORDS:
        return None  # the label modifies a noun ("we use the LU-KV cache to ..."): not the verb's object
    verb, rest = match.group("verb"), match.group("rest")
    if relative := re.match(r",\s+which\s+(?P<clause>.+)$", rest, re.DOTALL):
        return f"{label} {relative.group('clause')}"  # "we propose X, which introduces Y" -> "X introduces Y"
    if rest[:1] in tuple(",;:"):
        return None  # "we train XR-1, then tune it": the verb's other clause needs the subject
    be = "was" if verb.endswith("ed") else "is"
    subject = f"The {label}" if match.group("article") else label
    return f"{subject} {be} {match.group('adverbs')}{participle(verb)} {rest}".rstrip()


def opens_with_pronoun(sentence: str) -> bool:
    """Whether ``sentence`` opens without naming its subject (module docstring)."""
    from citerag.service.answering.language import PRONOUN_OPENING

    return bool(PRONOUN_OPENING.match(sentence))


def possessive(owner: str, noun: str) -> str:
    """``noun`` of ``owner``: "LU-KV's results", but "the <noun> of <owner>" when ``owner`` ends in a phrase after
    a preposition ("The paper on genome language models" + "tasks": "The tasks of the paper on genome language
    models", not "... models's tasks").

    >>> possessive("LU-KV", "results"), possessive("The paper on genome language models", "tasks")
    ("LU-KV's results", 'The tasks of the paper on genome language models')
    """
    if re.search(r"\s(?:on|of|for|with|in|from|under|via)\s", owner):
        return f"The {noun} of {owner[:1].lower() + owner[1:] if owner.startswith('The ') else owner}"
    return f"{owner}'s {noun}"


def name_subject(sentence: str, label: str, paper: str = "The paper") -> str:
    """``sentence`` with a pronoun or "our/this <noun>" opening replaced by ``label`` (module docstring), or by
    ``paper`` where the sentence names the label later ("we improve X by introducing ReVSI"); ``sentence``
    unchanged when it opens otherwise.

    >>> name_subject("We propose LU-KV, a KV cache eviction method.", "LU-KV")
    'LU-KV is a KV cache eviction method.'
    >>> name_subject("In this work, we further show that the bound is tight.", "BAPO")
    'BAPO further shows that the bound is tight.'
    >>> name_subject("We propose Faire (Functional alignment), a reinforcement learning framework.", "Faire")
    'Faire (Functional alignment) is a reinforcement learning framework.'
    >>> name_subject("To address these limits, we propose GP-EquiFlow, an equivariant flow model.", "GP-EquiFlow")
    'GP-EquiFlow is an equivariant flow model.'
    >>> name_subject("For this reason, we too focus on tree-based models.", "HOTs")  # an adverb before the verb
    'HOTs too focuses on tree-based models.'
    >>> name_subject("We empirically demonstrate, for the first time, a scaling law.", "The paper")
    'The paper empirically demonstrates, for the first time, a scaling law.'
    >>> name_subject("We introduce Divergence Decoding (DD), a decoding method.", "DD")
    'Divergence Decoding (DD) is a decoding method.'
    >>> name_subject("We establish GLEAN, an agent verification framework.", "GLEAN")
    'GLEAN is an agent verification framework.'
    >>> name_subject("To this end, we re-annotate object labels across 413 scenes.", "ReVSI")
    'ReVSI re-annotates object labels across 413 scenes.'
    >>> name_subject("We improve validity by introducing ReVSI, a benchmark.", "ReVSI")  # named later: the paper
    'The paper improves validity by introducing ReVSI, a benchmark.'
    >>> name_subject("At 10% memory, we keep 90% accuracy.", "LU-KV")  # a lead holding a number is kept
    'At 10% memory, we keep 90% accuracy.'
    >>> name_subject("Our results show a 12% gain.", "GLEAN"), name_subject("This enables faster decoding.", "ASMC")
    ("GLEAN's results show a 12% gain.", 'ASMC enables faster decoding.')
    >>> name_subject("These tasks predict evolutionary rate.", "The paper")
    "The paper's tasks predict evolutionary rate."
    >>> name_subject("Our method reaches 80.6%.", "ASMC"), name_subject("ASMC reaches 80.6%.", "ASMC")
    ('ASMC reaches 80.6%.', 'ASMC reaches 80.6%.')
    >>> name_subject("It is shown that looped transformers recognize all CFLs.", "The paper")  # a dummy "it"
    'The paper shows that looped transformers recognize all CFLs.'
    >>> name_subject("In this work, it is formally proven that the bound is tight.", "BAPO")
    'The paper proves that the bound is tight.'
    """
    lead = _LEAD.match(sentence)
    body = sentence[lead.end():] if lead else sentence
    if reported := _REPORTED.match(body):  # "It is shown that X": the dummy "it" of a passive report
        verb = reported.group("verb").lower()
        return f"{paper} {_REPORTING[verb]} that {reported.group('clause')}"
    match = re.match(r"(?P<word>\w+)(?:\s+(?P<noun>\w+(?:-\w+)*))?\s*(?P<rest>.*)$", body, re.DOTALL)
    if match is None:
        return sentence
    word, noun, rest = match.group("word").lower(), (match.group("noun") or ""), match.group("rest")
    if word == "we":
        tail = f"{noun} {rest}".strip()
        introduced = _INTRODUCES.match(tail)
        if introduced and introduced.group("name").strip("()").lower() == label.lower():
            return f"{label}{introduced.group('long') or ''} is {introduced.group('appositive')}"
        spelled = _INTRODUCES_LONG.match(tail)
        if spelled and spelled.group("name") == label:
            return f"{spelled.group('long')} ({label}) is {spelled.group('appositive')}"
        if turned := passive(tail, label):
            return turned
        # "we improve X by introducing ReVSI": the label is named later, so the subject is the paper
        mentioned = re.search(rf"(?<![\w-]){re.escape(label)}(?![\w-])", tail, re.IGNORECASE)
        return f"{paper if mentioned else label} {_agree(tail)}"
    if word in ("our", "its", "their", "this", "these", "the") and noun.lower() in RESEARCH_NOUNS:
        singular = noun.lower() in ("method", "model", "approach", "framework", "algorithm", "technique", "system",
                                    "architecture", "paper", "work", "study", "tool", "network", "pipeline",
                                    "procedure", "strategy", "proposal", "benchmark", "dataset")
        return f"{label} {rest}" if singular and word != "the" else f"{possessive(label, noun)} {rest}"
    if word in ("our", "its", "their"):
        return f"{possessive(label, noun)} {rest}".rstrip()
    if word in ("this", "these") and noun[:1].islower() and noun.lower() not in FUNCTION_WORDS \
            and (noun.lower().endswith("s") if word == "these" else not noun.lower().endswith(("s", "ed"))):
        # a determiner before its noun: "This mechanism is ...", "These tasks predict ..." (not "This enables ...",
        # "These include ...")
        return f"{possessive(label, noun)} {rest}".rstrip()
    if word in ("this", "it", "these", "they"):
        return f"{label} {_agree(f'{noun} {rest}'.strip()) if word in ('these', 'they') else f'{noun} {rest}'.strip()}"
    return sentence
