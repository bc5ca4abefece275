"""Generator speed: prompt and generation tokens/s, speculative drafts proposed and accepted, and time, for plain
greedy decoding and each variant, on two fixed workloads, with each variant's greedy text checked against the plain
decoder's.

    python -m bench.generator_speed                          # the default variants, both workloads, 20 questions
    python -m bench.generator_speed --questions 3 --no-record   # a quick check
    python -m bench.generator_speed --variant ngram-mod:n=3,max=4 --variant draft:max=3,p=0.6

Workloads:

* **fixed**: a fixed 250-token prompt (the opening tokens of a shipped abstract, a plain completion without the
  chat template) and 40 generated tokens (end of text ignored), read in full each time (no prompt cache), ``--repeat``
  times per variant;
* **written**: the written-answer prompt for the first ``--questions`` answerable questions of
  ``eval/devset.jsonl`` over the 38 shipped abstracts, made by the service's own steps (:func:`written_prompts`:
  the question analysed, its hybrid top ``CITERAG_ASK_K`` passages merged per document, the select-evidence
  step's sentences, the writer's messages), answered by :meth:`citerag.service.generator.Generator.chat` as the
  write step calls it (greedy, the writer's token limit, the fixed prefix pinned).

Every variant is loaded once, all of them side by side in this process, and the questions are asked of each variant
in turn (the order rotated per question), so a load that comes and goes on a shared machine falls on all variants
alike. Generation tokens/s is tokens generated / generation time (llama.cpp's ``predicted_ms``, which includes
drafting and verifying); the speed-up is against the plain decoder of the same run. A variant's text that differs
from the plain decoder's is printed.

Variant syntax: ``TYPE[:key=value,...]`` with TYPE one of ``none``, ``ngram-simple``, ``ngram-map-k``,
``ngram-map-k4v``, ``ngram-mod``, ``draft`` and keys ``n`` (the looked-up n-gram), ``max`` / ``min`` (draft length
bounds), ``hits`` (min_hits), ``p`` (the draft model's p_min), ``threads`` (generation threads), ``threads_batch``,
``n_batch``, ``n_ubatch``, ``cache`` (KV cache type), ``repack`` (0: weights as stored), ``fa`` (flash attention auto/on/off), ``model`` (a GGUF file for the main model, e.g. a repacked
one) — see :class:`citerag.service.generator.Decoding`. ``draft`` uses the packaged Qwen2.5-Coder-0.5B (the
``small-model`` extra) unless ``draft_model=PATH`` is given.
"""

from __future__ import annotations

import json
import sys
import time
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from bench.common import BenchIndexes, fmt, load_average, markdown_table, parser, record
from citerag.service.generator import SPECULATIVE_TYPES, Completion, Decoding, Generator
from citerag.service.settings import PROJECT_ROOT, Settings

DEVSET = PROJECT_ROOT / "eval" / "devset.jsonl"
FIXED_PROMPT_TOKENS = 250
FIXED_GENERATED_TOKENS = 40
EVIDENCE_SENTENCES = 4
DEFAULT_VARIANTS = (
    "ngram-simple:n=2,max=4",
    "ngram-map-k:n=2,max=4",
    "ngram-map-k4v:n=2,max=6",
    "ngram-mod:n=2,max=4",
    "ngram-mod:n=3,max=6",
    "draft:max=3,p=0.6",
)
STAND_IN_SYSTEM = "You answer questions about scientific papers from numbered evidence sentences."
STAND_IN_INSTRUCTION = "Answer in one to three sentences from the evidence, in its own words; name the method; cite [n]."

Messages = list[dict[str, str]]


# --- variants ----------------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Variant:
    """A decoding to measure: its :class:`Decoding`, its thread count and the model file it runs."""

    decoding: Decoding
    threads: int = 0
    model: Path | None = None

    @property
    def label(self) -> str:
        text = self.decoding.label()
        if self.threads:
            text += f" threads={self.threads}"
        if self.model is not None:
            text += f" model={self.model.name}"
        return text


def parse_variant(text: str, draft_model: Callable[[], Path]) -> Variant:
    """``"ngram-mod:n=3,max=4"`` -> a :class:`Variant` (module docstring for the syntax).

    Raises:
        SystemExit: an unknown type or key (status 2, one line on stderr).
    """
    kind, _, rest = text.partition(":")
    if kind not in SPECULATIVE_TYPES:
        print(f"error: variant {text!r}: type must be one of {', '.join(SPECULATIVE_TYPES)}", file=sys.stderr)
        raise SystemExit(2)
    names = {"n": "ngram_n", "max": "draft_max", "min": "draft_min", "hits": "min_hits", "p": "draft_p_min",
             "threads_batch": "threads_batch", "n_batch": "n_batch", "n_ubatch": "n_ubatch", "cache": "cache_type",
             "draft_model": "draft_model", "repack": "repack", "fa": "flash_attn"}
    values: dict[str, object] = {"speculative": kind}
    threads, model = 0, None
    for item in filter(None, rest.split(",")):
        key, _, value = item.partition("=")
        if key == "threads":
            threads = int(value)
        elif key == "model":
            model = Path(value)
        elif key in names:
            target = names[key]
            values[target] = (Path(value) if target == "draft_model" else value if target in ("cache_type", "flash_attn")
                              else value not in ("0", "no", "false") if target == "repack"
                              else float(value) if target == "draft_p_min" else int(value))
        else:
            print(f"error: variant {text!r}: unknown key {key!r} (known: {', '.join([*names, 'threads', 'model'])})",
                  file=sys.stderr)
            raise SystemExit(2)
    if kind == "draft" and "draft_model" not in values:
        values["draft_model"] = draft_model()
    return Variant(Decoding(**values), threads, model)  # type: ignore[arg-type]


# --- workloads ---------------------------------------------------------------------------------------------------


def stand_in_messages(question: str, evidence: Sequence[object]) -> Messages:
    """The bench's stand-in for the answer writer's messages, used before the service had a writer (the first
    RESULTS.md sweeps; ``--stand-in``): the numbered evidence sentences, the question and a plain instruction
    (:data:`STAND_IN_INSTRUCTION`)."""
    from citerag.index.text import fold

    lines = [f"[{i}] {fold(e.text)}" for i, e in enumerate(evidence, 1)]  # type: ignore[attr-defined]
    user = "Evidence:\n" + "\n".join(lines) + f"\n\nQuestion: {question}\n{STAND_IN_INSTRUCTION}"
    return [{"role": "system", "content": STAND_IN_SYSTEM}, {"role": "user", "content": user}]


@dataclass(slots=True)
class WrittenPrompt:
    qid: str
    question: str
    messages: Messages


def written_prompts(n_questions: int, qids: Sequence[str] = (), stand_in: bool = False) -> tuple[list[WrittenPrompt], str]:
    """The written-answer prompts of the first ``n_questions`` answerable dev-set questions (or those of ``qids``),
    and the name of the message builder used.

    The service's own steps make them: the analyse, retrieve and select-evidence steps run over the question's
    state (:class:`~citerag.service.answering.evidence.SelectEvidence`), then the writer's messages
    (:func:`~citerag.service.answering.prompts.writer_messages`); a question the steps abstain on is left out. With ``stand_in``: the top
    :data:`EVIDENCE_SENTENCES` sentences and :func:`stand_in_messages`.
    """
    from citerag.eval.retrieval import load_devset
    from citerag.index.store import IndexStore
    from citerag.service.answering.evidence import SelectEvidence, select_evidence
    from citerag.service.answering.prompts import writer_messages
    from citerag.service.answering.question import Analyse
    from citerag.service.answering.retrieve import Retrieve
    from citerag.service.answering.state import AnswerState
    from citerag.service.pipeline import load_embedder, open_retriever

    settings = Settings()
    _, built = BenchIndexes().seed()
    retriever = open_retriever(settings, IndexStore(built.directory).load())
    encode = load_embedder(settings).encode
    step = SelectEvidence(encode, settings.evidence_sentences)
    prompts = []
    questions = [q for q in load_devset(DEVSET) if q.qrels and (not qids or q.qid in qids)]
    for q in questions[:n_questions]:
        state = AnswerState(question=q.question, k=settings.ask_k)
        for component in (Analyse(), Retrieve(retriever)):
            component.run(state)
        if stand_in:
            messages = stand_in_messages(q.question, select_evidence(q.question, state.passages, encode,
                                                                     keep=EVIDENCE_SENTENCES))
        else:
            step.run(state)  # the select-evidence step, as the service runs it
            if state.abstained or state.info is None:
                continue
            messages = writer_messages(state.info, state.evidence)
        prompts.append(WrittenPrompt(q.qid, q.question, messages))
    name = ("bench stand-in (stand_in_messages)" if stand_in else
            "the service's writer (citerag.service.answering.prompts.writer_messages, evidence of the "
            "select-evidence step)")
    return prompts, name


def fixed_prompt(generator: Generator) -> list[int]:
    """The first :data:`FIXED_PROMPT_TOKENS` tokens of the shipped abstracts (in file order), as token ids."""
    from citerag.index.ingest import load_documents
    from bench.common import SEED_CORPUS

    text = " ".join(doc.text for doc in load_documents([SEED_CORPUS])[:3])
    tokens = tokenize(generator, text)
    if len(tokens) < FIXED_PROMPT_TOKENS:
        raise RuntimeError(f"the fixed prompt has {len(tokens)} tokens, fewer than {FIXED_PROMPT_TOKENS}")
    return tokens[:FIXED_PROMPT_TOKENS]


def tokenize(generator: Generator, text: str) -> list[int]:
    """``text``'s token ids, from the model's own tokenizer (llama.cpp's ``/tokenize`` on the loopback port)."""
    server = generator._server  # noqa: SLF001 - the bench reads the model's tokenizer
    request = urllib.request.Request(
        f"{server.listening_address}/tokenize", data=json.dumps({"content": text}).encode(),
        headers={"Content-Type": "application/json", "Authorization": f"Bearer {generator._api_key}"},  # noqa: SLF001
    )
    with urllib.request.urlopen(request, timeout=60) as response:
        return list(json.loads(response.read())["tokens"])


# --- measuring ---------------------------------------------------------------------------------------------------


@dataclass(slots=True)
class Tally:
    prompt_tokens: int = 0
    prompt_ms: float = 0.0
    generated: int = 0
    generate_ms: float = 0.0
    drafted: int = 0
    accepted: int = 0
    wall_s: float = 0.0
    texts: list[str] = field(default_factory=list)

    def add(self, c: Completion, wall_s: float) -> None:
        self.prompt_tokens += c.prompt_tokens
        self.prompt_ms += c.prompt_ms
        self.generated += c.completion_tokens
        self.generate_ms += c.generate_ms
        self.drafted += c.draft_tokens
        self.accepted += c.draft_accepted
        self.wall_s += wall_s
        self.texts.append(c.text)

    @property
    def prompt_rate(self) -> float:
        return self.prompt_tokens / (self.prompt_ms / 1000) if self.prompt_ms else float("nan")

    @property
    def generate_rate(self) -> float:
        return self.generated / (self.generate_ms / 1000) if self.generate_ms else float("nan")


def run_fixed(generator: Generator, prompt: list[int]) -> Completion:
    """One fixed-workload completion: the whole prompt read (no cache), 40 tokens generated."""
    from citerag.service.generator import _completion

    generator.unpin()  # no pin of an earlier call runs beside this one
    response = generator._server.handle_completions({  # noqa: SLF001
        "prompt": prompt, "n_predict": FIXED_GENERATED_TOKENS, "temperature": 0.0, "seed": 0, "cache_prompt": False,
        "ignore_eos": True,
    })
    if "error" in response:
        raise RuntimeError(f"generation failed: {response['error']}")
    generator.unpin()  # the cache no longer holds the pinned prefix
    return _completion(response["choices"][0]["text"], "length", response)


def timed(call: Callable[[], Completion]) -> tuple[Completion, float]:
    started = time.perf_counter()
    completion = call()
    return completion, time.perf_counter() - started


def main() -> None:
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--questions", type=int, default=20, help="the first N answerable dev-set questions")
    p.add_argument("--qids", default="", help="only these dev-set questions (comma-separated ids)")
    p.add_argument("--stand-in", action="store_true", help="the bench's stand-in writer prompt (4 sentences, a plain "
                   "instruction) instead of the service's writer")
    p.add_argument("--repeat", type=int, default=3, help="fixed-workload completions per variant")
    p.add_argument("--variant", action="append", help="a variant to measure beside plain decoding (repeatable; "
                   f"default: {' '.join(DEFAULT_VARIANTS)})")
    p.add_argument("--baseline", default="none", help="the plain decoder the others are compared with (a variant "
                   "spec, e.g. none:threads_batch=1)")
    p.add_argument("--workload", choices=["fixed", "written", "both", "batch"], default="both",
                   help="batch: only the cost of evaluating 1..8 tokens after a cached 250-token prompt (what a "
                   "draft's verification costs), per variant")
    p.add_argument("--pin-saving", action="store_true", help="also ask each question of the baseline with no prompt "
                   "cache (the pinned system prefix read again), to measure what the pin saves")
    p.add_argument("--title", default="Generator speed (speculative decoding and CPU settings)")
    p.add_argument("--note", action="append", default=[], help="a note for RESULTS.md (repeatable)")
    args = p.parse_args()

    settings = Settings()
    from citerag.service.pipeline import generator_path

    def draft_model() -> Path:
        from citerag.service.model_files import GENERATORS, assemble_gguf

        return assemble_gguf(GENERATORS["qwen2.5-coder-0.5b"], settings.cache_dir)

    specs = [args.baseline, *(args.variant or DEFAULT_VARIANTS)]
    variants = [parse_variant(spec, draft_model) for spec in specs]
    main_model = generator_path(settings)

    prompts: list[WrittenPrompt] = []
    writer_name = ""
    if args.workload in ("written", "both"):
        prompts, writer_name = written_prompts(args.questions, [q for q in args.qids.split(",") if q], args.stand_in)
        print(f"{len(prompts)} written-answer prompts ({writer_name})", flush=True)

    generators: list[Generator] = []
    for v in variants:
        started = time.perf_counter()
        g = Generator(v.model or main_model, n_ctx=settings.n_ctx, threads=v.threads or settings.threads,
                      decoding=v.decoding)
        print(f"loaded {v.label} in {time.perf_counter() - started:.1f} s"
              + (f" -- FALLBACK: {g.fallback}" if g.fallback else ""), flush=True)
        if not args.stand_in:
            from citerag.service.answering.prompts import FIXED_MESSAGES

            g.fixed_messages = FIXED_MESSAGES  # as the answering pipeline sets it: system prompt + worked example
        generators.append(g)

    loads: list[str] = []
    if args.workload == "batch":
        batch_costs(generators, variants, args)
        return
    fixed = [Tally() for _ in variants]
    written = [Tally() for _ in variants]
    per_question: list[list[Completion]] = []
    if args.workload in ("fixed", "both"):
        prompt = fixed_prompt(generators[0])
        for g in generators:  # warm-up: the first completion pays one-off costs
            run_fixed(g, prompt[:32])
        for r in range(args.repeat):
            loads.append(load_average())
            for i in _rotated(len(generators), r):
                completion, wall = timed(lambda g=generators[i]: run_fixed(g, prompt))
                fixed[i].add(completion, wall)
        print("fixed workload done", flush=True)
    from citerag.service.answering.write import MAX_ANSWER_TOKENS

    written_max_tokens = 128 if args.stand_in else MAX_ANSWER_TOKENS
    pin_ms: list[tuple[float, float]] = []
    if prompts:
        for g in generators:
            g.chat([prompts[0].messages[0], {"role": "user", "content": "Say OK."}], max_tokens=2)
        for qi, wp in enumerate(prompts):
            loads.append(load_average())
            row: list[Completion | None] = [None] * len(generators)
            for i in _rotated(len(generators), qi):
                completion, wall = timed(lambda g=generators[i]: g.chat(wp.messages, max_tokens=written_max_tokens))
                generators[i].settle()  # its cache pin, run now, not beside the next variant's call
                written[i].add(completion, wall)
                row[i] = completion
            per_question.append(row)  # type: ignore[arg-type]
            if args.pin_saving:
                base = generators[0]
                base.unpin()
                response = base._server.handle_chat_completions({  # noqa: SLF001
                    "messages": wp.messages, "max_tokens": 1, "temperature": 0.0, "seed": 0, "cache_prompt": False})
                base.unpin()
                pin_ms.append((row[0].prompt_ms, float(response["timings"]["prompt_ms"])))  # type: ignore[union-attr]
            plain = row[0]
            print(f"{wp.qid}: " + "  ".join(
                f"[{k}] {c.completion_tokens}t {c.completion_tokens / max(c.generate_ms, 1e-9) * 1000:.1f}/s "
                f"d{c.draft_accepted}/{c.draft_tokens}{'' if c.text == plain.text else ' DIFF'}"  # type: ignore[union-attr]
                for k, c in enumerate(row)), flush=True)

    rows = []
    base_fixed, base_written = fixed[0], written[0]
    for i, v in enumerate(variants):
        f, w = fixed[i], written[i]
        same = sum(t == b for t, b in zip(w.texts, base_written.texts))
        rows.append([
            v.label + (" (baseline)" if i == 0 else "") + (f" FELL BACK: {generators[i].fallback}" if generators[i].fallback else ""),
            fmt(f.prompt_rate, 1), fmt(f.generate_rate, 1), _ratio(f.generate_rate, base_fixed.generate_rate),
            f"{f.accepted}/{f.drafted}", fmt(f.wall_s, 1),
            fmt(w.prompt_rate, 1), fmt(w.generate_rate, 1), _ratio(w.generate_rate, base_written.generate_rate),
            f"{w.accepted}/{w.drafted}", str(w.generated), fmt(w.wall_s, 1), _ratio(base_written.wall_s, w.wall_s),
            f"{same}/{len(w.texts)}" if w.texts else "-",
        ])
    table = markdown_table([
        "variant", "fixed: prompt tok/s", "fixed: gen tok/s", "fixed: gen x plain", "fixed: drafts acc/proposed",
        "fixed: total s", "written: prompt tok/s", "written: gen tok/s", "written: gen x plain",
        "written: drafts acc/proposed", "written: tokens", "written: total s", "written: speed x plain",
        "written: same text as plain",
    ], rows)
    notes = [
        f"fixed: {args.repeat if args.workload != 'written' else 0} x ({FIXED_PROMPT_TOKENS}-token prompt read in "
        f"full + {FIXED_GENERATED_TOKENS} tokens, end of text ignored) per variant; total s is wall time of all of them",
        f"written: {len(prompts)} answerable questions of eval/devset.jsonl over the 38 shipped abstracts; "
        f"the hybrid top {settings.ask_k} passages; messages from {writer_name or '-'}; Generator.chat greedy, "
        f"max {written_max_tokens} tokens, the fixed prefix pinned; "
        "total s = wall time of the answers (prompt + generation); speed x plain = plain total / variant total",
        "gen tok/s = tokens generated / llama.cpp's predicted_ms (drafting and verification included); "
        "x plain = against the baseline row of this same run; all variants loaded side by side, questions asked of "
        "each in turn (order rotated per question)",
        f"model: {main_model.name} (xllamacpp), threads {settings.threads or 'all'}",
        *args.note,
    ]
    if pin_ms:
        pinned, full = sum(a for a, _ in pin_ms), sum(b for _, b in pin_ms)
        notes.append(f"pinned prefix: baseline prompt evaluation {pinned / 1000:.1f} s with the pinned system prefix vs "
                     f"{full / 1000:.1f} s reading the whole prompt ({len(pin_ms)} questions; saving "
                     f"{(full - pinned) / 1000:.1f} s, {100 * (full - pinned) / full:.0f} %)")
    diffs = []
    for qi, row in enumerate(per_question):
        for i, c in enumerate(row[1:], 1):
            if c.text != row[0].text:
                diffs.append(f"{prompts[qi].qid} [{variants[i].label}]: {c.text!r} vs plain {row[0].text!r}")
    if diffs:
        notes.append("texts that differ from the plain decoder's:")
        notes.extend("  " + d for d in diffs)
    record(args.title, table, notes, loads, write=not args.no_record)


def batch_costs(generators: Sequence[Generator], variants: Sequence[Variant], args) -> None:  # noqa: ANN001
    """The time llama.cpp takes to evaluate k = 1..8 new tokens after a cached 250-token prompt (the best of
    ``--repeat`` tries), per variant: what verifying a draft of k - 1 tokens costs against one plain step."""
    import random

    prompt = fixed_prompt(generators[0])
    rng = random.Random(0)
    sizes = list(range(1, 9))
    best = [[float("inf")] * len(sizes) for _ in generators]
    loads = []

    def call(g: Generator, tokens: list[int]) -> dict:
        g.unpin()
        response = g._server.handle_completions({  # noqa: SLF001
            "prompt": tokens, "n_predict": 1, "temperature": 0.0, "cache_prompt": True})
        g.unpin()
        return response["timings"]

    for r in range(args.repeat):
        loads.append(load_average())
        for i in _rotated(len(generators), r):
            g = generators[i]
            for j, k in enumerate(sizes):
                call(g, prompt)  # the cache holds exactly the prompt
                extra = [rng.randrange(1000, 30000) for _ in range(k)]
                timings = call(g, prompt + extra)
                if int(timings["prompt_n"]) == k:
                    best[i][j] = min(best[i][j], float(timings["prompt_ms"]))
    rows = [[v.label, *(fmt(ms, 0) for ms in best[i]), *(fmt(best[i][j] / best[i][0], 2) for j in (2, 3, 4))]
            for i, v in enumerate(variants)]
    table = markdown_table(["variant", *(f"{k} tok ms" for k in sizes), "3 / 1", "4 / 1", "5 / 1"], rows)
    record(args.title, table, [
        f"ms to evaluate k new tokens (random ids) after a cached {FIXED_PROMPT_TOKENS}-token prompt, best of "
        f"{args.repeat}; a draft of k - 1 tokens is verified in one such batch", *args.note], loads,
        write=not args.no_record)


def _rotated(n: int, shift: int) -> list[int]:
    """Indices ``0..n-1`` starting at ``shift % n``."""
    return [(shift + k) % n for k in range(n)]


def _ratio(value: float, base: float) -> str:
    return "-" if not (value == value and base == base and base) else f"{value / base:.2f}x"


if __name__ == "__main__":
    main()
