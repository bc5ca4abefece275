"""The local language model: a GGUF file run by llama.cpp through the ``xllamacpp`` prebuilt CPU wheels."""

from __future__ import annotations

import functools
import json
import logging
import os
import secrets
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal

from citerag.index.priority import started_at_lower_priority

log = logging.getLogger(__name__)

#: llama.cpp's speculative decoding types the service can run (``none``: plain greedy decoding, one token a step).
Speculative = Literal["none", "ngram-simple", "ngram-map-k", "ngram-map-k4v", "ngram-mod", "draft"]
SPECULATIVE_TYPES: tuple[str, ...] = ("none", "ngram-simple", "ngram-map-k", "ngram-map-k4v", "ngram-mod", "draft")
KV_CACHE_TYPES: tuple[str, ...] = ("f16", "q8_0", "q4_0", "f32", "bf16")
#: The default bound of llama.cpp's in-memory prompt cache (MiB): about nine 1,000-token prompts of the 1.5B model.
PROMPT_CACHE_MB = 256


@dataclass(frozen=True, slots=True)
class Decoding:
    """How the generator decodes: plain greedy, or greedy with llama.cpp's speculative decoding (a draft of
    several tokens verified in one batch; the output is the plain decoder's, up to the last bits of batched
    arithmetic), and the CPU settings of the context.

    Attributes:
        speculative: ``none``; ``ngram-simple`` / ``ngram-map-k`` / ``ngram-map-k4v``: the tokens that followed
            the latest earlier occurrence (prompt or answer so far) of the last ``ngram_n`` tokens are the draft;
            ``ngram-mod``: each draft token is looked up from the ``ngram_n`` tokens before it in a hash of the
            prompt's n-grams, the draft going on while lookups hit; ``draft``: a small model of the same
            tokenizer (``draft_model``) writes the draft.
        ngram_n: the n-gram that is looked up (size_n, or ngram-mod's n_match).
        draft_max: the longest draft (ngram size_m, ngram-mod n_max, the draft model's n_max).
        draft_min: the shortest draft worth verifying (ngram-mod's n_min, the draft model's n_min).
        min_hits: ngram-map-k4v: times a key must have been seen before its value is drafted.
        draft_model: the draft model's GGUF file (``speculative="draft"``).
        draft_p_min: the draft model stops drafting below this probability of its own best token.
        threads_batch: CPU threads for prompt evaluation (batches); 0: the generation threads.
        n_batch, n_ubatch: logical and physical batch sizes of prompt evaluation (0: llama.cpp's defaults).
        cache_type: the KV cache's element type (``f16``, ``q8_0``, ...).
        repack: let llama.cpp repack the weights at load into its interleaved CPU layouts (``Q4_K`` -> ``q4_K_8x8``:
            faster matrix products, but a product of several tokens is summed in another order than a single
            token's, so a verified draft's logits differ in the last bits from one-token decoding); ``False``: the
            weights as stored, every product summed the same way whatever the batch.
    """

    speculative: Speculative = "none"
    ngram_n: int = 3
    draft_max: int = 4
    draft_min: int = 1
    min_hits: int = 1
    draft_model: Path | None = None
    draft_p_min: float = 0.5
    threads_batch: int = 0
    n_batch: int = 0
    n_ubatch: int = 0
    cache_type: str = "f16"
    repack: bool = True
    flash_attn: Literal["auto", "on", "off"] = "auto"

    def describe(self) -> dict[str, Any]:
        """The settings that matter for this decoding, for ``/health`` and ``citerag doctor``."""
        out: dict[str, Any] = {"speculative": self.speculative}
        if self.speculative == "draft":
            out.update(draft_model=str(self.draft_model), draft_max=self.draft_max, draft_min=self.draft_min,
                       draft_p_min=self.draft_p_min)
        elif self.speculative != "none":
            out.update(ngram_n=self.ngram_n, draft_max=self.draft_max)
            if self.speculative == "ngram-mod":
                out.update(draft_min=self.draft_min)
            if self.speculative == "ngram-map-k4v":
                out.update(min_hits=self.min_hits)
        if self.threads_batch:
            out["threads_batch"] = self.threads_batch
        if self.n_batch or self.n_ubatch:
            out.update(n_batch=self.n_batch, n_ubatch=self.n_ubatch)
        if self.cache_type != "f16":
            out["cache_type"] = self.cache_type
        if not self.repack:
            out["repack"] = False
        if self.flash_attn != "auto":
            out["flash_attn"] = self.flash_attn
        return out

    def label(self) -> str:
        """A short name: ``ngram-mod n3 max4``, ``draft max4 p0.5``, ``none``; CPU settings appended."""
        if self.speculative == "none":
            text = "none"
        elif self.speculative == "draft":
            text = f"draft max{self.draft_max} min{self.draft_min} p{self.draft_p_min:g}"
        else:
            text = f"{self.speculative} n{self.ngram_n} max{self.draft_max}"
            if self.speculative == "ngram-mod" and self.draft_min != 1:
                text += f" min{self.draft_min}"
            if self.speculative == "ngram-map-k4v" and self.min_hits != 1:
                text += f" hits{self.min_hits}"
        for key, value in self.describe().items():
            if key in ("threads_batch", "n_batch", "n_ubatch", "cache_type", "repack", "flash_attn"):
                text += f" {key}={value}"
        return text

    def plain(self) -> Decoding:
        """The same CPU settings, no speculation."""
        return replace(self, speculative="none")


@dataclass(frozen=True, slots=True)
class Completion:
    """One chat completion.

    Attributes:
        text: the generated text.
        prompt_tokens, completion_tokens: token counts (model tokens).
        prompt_ms: prompt evaluation time (ms), as reported by llama.cpp (low when the prefix was cached).
        generate_ms: token generation time (ms).
        finish_reason: ``"stop"`` (end of answer) or ``"length"`` (hit ``max_tokens``).
        top_logprobs: for each generated token, the model's natural-log probabilities of its most likely tokens
            at that position (token text -> logprob), taken before any grammar constrains the choice; empty unless
            asked for (``top_logprobs`` of :meth:`Generator.chat`).
        draft_tokens, draft_accepted: speculative decoding's draft tokens proposed and accepted (0 when plain).
    """

    text: str
    prompt_tokens: int
    completion_tokens: int
    prompt_ms: float
    generate_ms: float
    finish_reason: str
    top_logprobs: tuple[dict[str, float], ...] = ()
    draft_tokens: int = 0
    draft_accepted: int = 0


#: The suffix of the file beside a saved prompt state that records its size in bytes (:meth:`Generator.has_state`).
STATE_SIZE_SUFFIX = ".size"


class Generator:
    """A chat model loaded once per process; calls are serialised (one slot), so concurrent callers queue.

    llama.cpp keeps the KV cache of the previous prompt, so the shared system-prompt prefix is evaluated once. The
    cache is pinned to that prefix around every call (:meth:`_pin_prefix`): llama.cpp's logits differ slightly
    between evaluating a prompt's tail as one batch and re-using a whole cached prompt (llama.cpp issues #4902,
    #28527), which can change greedy output; with the pin, the same messages always take the same path and give the
    same answer, whatever was asked before. The pin after a call runs on a background thread once the call has
    returned (:meth:`_schedule_pin`), so the answer is not held for it; the slot's next call waits for it (or runs
    it first), so the order of work in each slot is the same either way.

    Args:
        model_path: a GGUF file.
        n_ctx: context window in tokens.
        threads: CPU threads (0 = all cores).
        slots: llama.cpp slots, each with its own KV cache of ``n_ctx`` tokens (~115 MB for the 1.5B model at 4096):
            a call names its slot, so two conversations with different fixed prefixes (the answer's and the yes/no
            decision's) each keep theirs cached. Calls still run one at a time.
        state_dir: where :meth:`read_and_save` keeps prompt states (llama.cpp's slot files; ``None``: states cannot be
            saved). A state holds its slot's KV cache: ~28 KB per token for the 1.5B model at f16.
        prompt_cache_mb: the most memory llama.cpp's server keeps prompt states of earlier requests in (MiB;
            llama.cpp's own default is 8192; 0: none). The papers' states have their own bounded disk cache
            (:mod:`citerag.service.answering.states`), so this only spares recomputing a prompt a slot held recently.
        nice: the nice increment of llama.cpp's threads (:mod:`citerag.index.priority`; 0: the caller's priority),
            so that searches served beside a generation are not slowed by it.
        decoding: speculative decoding and CPU settings (:class:`Decoding`; default plain). When the requested
            decoding fails to load (a missing or incompatible draft model, a setting llama.cpp refuses), the model
            is loaded with plain decoding and the same CPU settings, with a logged warning; :attr:`decoding`
            says what runs and :attr:`fallback` why it is not what was asked.

    Attributes:
        decoding: the decoding in use.
        requested: the decoding asked for.
        fallback: why the requested decoding is not in use (``None`` when it is).

    Raises:
        FileNotFoundError: ``model_path`` does not exist.
        RuntimeError: llama.cpp could not load the model even with plain decoding.
    """

    def __init__(self, model_path: Path, n_ctx: int = 4096, threads: int = 0, decoding: Decoding | None = None,
                 slots: int = 1, state_dir: Path | None = None, nice: int = 0,
                 prompt_cache_mb: int = PROMPT_CACHE_MB) -> None:
        if not Path(model_path).is_file():
            raise FileNotFoundError(f"generator model not found: {model_path}")
        if slots < 1:
            raise ValueError(f"slots must be >= 1, got {slots}")
        self.model_path = Path(model_path)
        self.n_ctx = n_ctx
        self.slots = slots
        self.threads = threads or os.cpu_count() or 2
        self.nice = nice
        self.prompt_cache_mb = prompt_cache_mb
        self.state_dir = Path(state_dir) if state_dir is not None else None
        if self.state_dir is not None:
            self.state_dir.mkdir(parents=True, exist_ok=True)
        self.requested = decoding or Decoding()
        self.fallback: str | None = None
        try:
            self._server = self._load(self.requested)
            self.decoding = self.requested
        except Exception as exc:  # noqa: BLE001 - any failure of a speculative variant falls back to plain decoding
            if self.requested.speculative == "none":
                raise
            self.fallback = f"{self.requested.label()} failed to load ({type(exc).__name__}: {exc})"
            log.warning("speculative decoding off: %s; generating with plain decoding", self.fallback)
            self.decoding = self.requested.plain()
            self._server = self._load(self.decoding)
        self._lock = threading.Lock()
        #: The slots whose prefix has been pinned (a slot's first call pins it first, so that it takes the same path
        #: as every later one).
        self._pinned: set[int] = set()
        #: Leading messages every prompt shares (system prompt, worked example): what :meth:`_pin_prefix` keeps
        #: (a call may name its own count).
        self.fixed_messages = 1
        #: Pins scheduled and not yet run, by slot: the prefix messages to pin (:meth:`_schedule_pin`).
        self._pending: dict[int, list[dict[str, str]]] = {}
        self._pinner = ThreadPoolExecutor(max_workers=1, thread_name_prefix="citerag-pin")

    def decoding_report(self) -> dict[str, Any]:
        """The decoding in use (:meth:`Decoding.describe`), and when it fell back, what was asked and why."""
        report = self.decoding.describe()
        if self.fallback is not None:
            report.update(requested=self.requested.describe(), fallback=self.fallback)
        return report

    def _load(self, decoding: Decoding) -> Any:
        """An xllamacpp server of the model with ``decoding``'s settings.

        Raises:
            FileNotFoundError: the draft model does not exist.
            ValueError: a setting out of range.
            RuntimeError: llama.cpp refused the parameters or the model.
        """
        import xllamacpp

        params = xllamacpp.CommonParams()
        params.model.path = str(self.model_path)
        params.n_ctx = self.n_ctx * self.slots  # llama.cpp divides it among the slots
        params.n_parallel = self.slots
        params.cache_prompt = True
        params.cache_ram_mib = self.prompt_cache_mb  # llama.cpp's default, 8192 MiB, grows the process for hours
        params.verbosity = -1
        if self.state_dir is not None:
            params.slot_save_path = f"{self.state_dir}{os.sep}"  # llama.cpp joins the file name to it as a string
        params.cpuparams.n_threads = self.threads
        params.cpuparams_batch.n_threads = decoding.threads_batch or self.threads
        if decoding.n_batch:
            params.n_batch = decoding.n_batch
        if decoding.n_ubatch:
            params.n_ubatch = decoding.n_ubatch
        params.no_extra_bufts = not decoding.repack
        if decoding.flash_attn != "auto":
            kind = xllamacpp.llama_flash_attn_type
            params.flash_attn_type = (kind.LLAMA_FLASH_ATTN_TYPE_ENABLED if decoding.flash_attn == "on"
                                      else kind.LLAMA_FLASH_ATTN_TYPE_DISABLED)
        if decoding.cache_type != "f16":
            if decoding.cache_type not in KV_CACHE_TYPES:
                raise ValueError(f"cache_type {decoding.cache_type!r}: one of {', '.join(KV_CACHE_TYPES)}")
            kind = getattr(xllamacpp.ggml_type, f"GGML_TYPE_{decoding.cache_type.upper()}")
            params.cache_type_k = kind
            params.cache_type_v = kind
        if decoding.speculative != "none":
            _speculative_params(xllamacpp, params, decoding, self.threads)
        # xllamacpp also opens llama.cpp's HTTP server on a random loopback port; a random key keeps it private.
        self._api_key = secrets.token_hex(16)
        params.api_keys = [self._api_key]
        # llama.cpp's threads start with the priority of the thread that starts the server (index/priority.py)
        return started_at_lower_priority(lambda: xllamacpp.Server(params), self.nice, name="citerag-model-start")

    def chat(
        self,
        messages: list[dict[str, str]],
        max_tokens: int,
        on_delta: Callable[[str], bool | None] | None = None,
        grammar: str | None = None,
        top_logprobs: int = 0,
        pin: bool = True,
        slot: int = 0,
        fixed: int | None = None,
    ) -> Completion:
        """Run one greedy (temperature 0) chat completion.

        Args:
            messages: OpenAI-style ``[{"role": ..., "content": ...}]``; a final ``assistant`` message is continued
                (llama.cpp's assistant prefill): the completion's text is what follows it, streamed or not.
            max_tokens: generation limit (tokens).
            on_delta: called with each new piece of text as it is generated; return ``True`` to stop early.
            grammar: a llama.cpp GBNF grammar the output must match (``root ::= "yes" | "no"``).
            top_logprobs: how many of each position's most likely tokens to report (0-20; 0 reports none).
            pin: re-pin the KV cache to the system prompt afterwards (:meth:`_pin_prefix`); ``False`` keeps this
                prompt cached for a next call that extends it (two questions about one evidence list).
            slot: the llama.cpp slot (``0 .. slots - 1``) whose cache this call reads and extends.
            fixed: how many leading messages are the pinned prefix (default :attr:`fixed_messages`).

        Raises:
            ValueError: ``slot`` out of range.
            RuntimeError: llama.cpp reported an error.
        """
        if not 0 <= slot < self.slots:
            raise ValueError(f"slot must be in 0..{self.slots - 1}, got {slot}")
        fixed = self.fixed_messages if fixed is None else fixed
        request: dict[str, Any] = {
            "messages": messages,
            "max_tokens": max_tokens,
            "temperature": 0.0,
            "seed": 0,
            "cache_prompt": True,
            "id_slot": slot,
        }
        if grammar is not None:
            request["grammar"] = grammar
        if top_logprobs:
            request.update(logprobs=True, top_logprobs=top_logprobs)
        with self._lock:
            self._run_pending(slot)
            if slot not in self._pinned:
                self._pin_prefix(messages[:fixed], slot)
            try:
                if on_delta is None:
                    response = self._server.handle_chat_completions(request)
                    if "error" in response:
                        raise RuntimeError(f"generation failed: {response['error']}")
                    choice = response["choices"][0]
                    text = choice["message"]["content"] or ""
                    prefill = messages[-1]["content"] if messages[-1]["role"] == "assistant" else ""
                    text = text[len(prefill):] if prefill and text.startswith(prefill) else text
                    completion = _completion(text, choice["finish_reason"], response)
                    if top_logprobs:
                        completion = replace(completion, top_logprobs=_top_logprobs(choice))
                    return completion
                return self._stream(request, on_delta)
            finally:
                if pin:
                    self._schedule_pin(messages[:fixed], slot)

    def pin(self, messages: list[dict[str, str]], slot: int = 0, fixed: int | None = None) -> None:
        """Re-pin ``slot``'s cache to ``messages``' fixed prefix (:meth:`_pin_prefix`; ``fixed`` leading messages,
        default :attr:`fixed_messages`) after calls made with ``pin=False``, once nothing more will extend their
        prompt; it runs in the background (:meth:`_schedule_pin`)."""
        with self._lock:
            self._schedule_pin(messages[:self.fixed_messages if fixed is None else fixed], slot)

    @functools.cached_property
    def state_identity(self) -> str:
        """What a saved prompt state depends on besides its prompt: the model file (name and size), llama.cpp's
        version (xllamacpp's) and the KV cache type; part of a state's name, so a changed model reads afresh. Read
        once: the loaded model does not change."""
        import xllamacpp

        size = self.model_path.stat().st_size
        return f"{self.model_path.name}:{size}:{xllamacpp.__version__}:{self.decoding.cache_type}"

    def has_state(self, name: str) -> bool:
        """Whether a prompt state called ``name`` is saved whole (:meth:`read_and_save`): its file holds as many
        bytes as llama.cpp wrote (recorded beside it, ``<name>.size``). llama.cpp aborts the process on restoring a
        truncated state file (``GGML_ASSERT(nread <= state_size)``, seen for yes/no states), so a file cut short
        (a full disk, a crash while saving, a damaged copy) or one without its record counts as not saved and is
        read again."""
        if self.state_dir is None:
            return False
        try:
            recorded = int((self.state_dir / f"{name}{STATE_SIZE_SUFFIX}").read_text(encoding="ascii"))
            return (self.state_dir / name).stat().st_size == recorded
        except (OSError, ValueError):
            return False

    def read_and_save(self, messages: list[dict[str, str]], name: str, slot: int = 0,
                      fixed: int | None = None) -> None:
        """Read ``messages`` into ``slot`` as :meth:`chat` reads a prompt (the slot pinned to the ``fixed`` leading
        messages first, the rest in one batch) and save the slot's state as ``name`` (llama.cpp's slot file, ~20 MB
        for ~750 tokens): a later prompt that starts with ``messages``' text restores it (:meth:`restore_state`) instead
        of reading them again. The slot keeps the state, so a prompt that extends it follows at once.

        Raises:
            RuntimeError: the generator has no ``state_dir``, or llama.cpp refused.
        """
        fixed = self.fixed_messages if fixed is None else fixed
        with self._lock:
            self._pending.pop(slot, None)
            self._pin_prefix(messages[:fixed], slot)  # always from the pin, so every saved state is read alike
            response = self._read_prompt(messages, slot)
            if "error" in response:
                raise RuntimeError(f"reading the prompt failed: {response['error']}")
            self._save(slot, name)

    def _save(self, slot: int, name: str) -> None:
        """Save ``slot``'s state as ``name`` whole or not at all: llama.cpp writes ``<name>.partial``, which is
        renamed once its size is the bytes llama.cpp reports written, and that size is recorded (``<name>.size``,
        :meth:`has_state`); a failed save leaves nothing. The caller holds the lock.

        Raises:
            RuntimeError: llama.cpp refused, or wrote fewer bytes than it reports (a full disk).
        """
        assert self.state_dir is not None
        partial, final = self.state_dir / f"{name}.partial", self.state_dir / name
        (self.state_dir / f"{name}{STATE_SIZE_SUFFIX}").unlink(missing_ok=True)
        try:
            written = self._slot_action(slot, "save", partial.name).get("n_written")
            size = partial.stat().st_size
            if written is not None and size != written:
                raise RuntimeError(f"llama.cpp wrote {size} of {written} bytes of the prompt state {name}")
            os.replace(partial, final)
            record = self.state_dir / f"{name}{STATE_SIZE_SUFFIX}.partial"
            record.write_text(str(size), encoding="ascii")
            os.replace(record, self.state_dir / f"{name}{STATE_SIZE_SUFFIX}")
        except OSError as exc:
            partial.unlink(missing_ok=True)
            raise RuntimeError(f"saving the prompt state {name} failed: {exc}") from exc
        except RuntimeError:
            partial.unlink(missing_ok=True)
            raise

    def restore_state(self, name: str, slot: int = 0) -> bool:
        """Put the saved state ``name`` in ``slot`` (~5 ms for ~20 MB), replacing any pin scheduled for it; ``False``
        (the slot then pins again on its next call) when it cannot be read."""
        with self._lock:
            self._pending.pop(slot, None)
            try:
                self._slot_action(slot, "restore", name)
            except RuntimeError:
                log.warning("restoring prompt state %s failed; the prompt is read instead", name, exc_info=True)
                self._pinned.discard(slot)
                return False
            self._pinned.add(slot)  # the state starts with the fixed prefix: the next call reads only the rest
            return True

    def _slot_action(self, slot: int, action: Literal["save", "restore"], name: str) -> dict[str, Any]:
        """llama.cpp's ``POST /slots/{slot}?action=save|restore`` on the server xllamacpp opens (loopback, keyed).
        The caller holds the lock.

        Raises:
            RuntimeError: no ``state_dir``, or llama.cpp answered with an error.
        """
        if self.state_dir is None:
            raise RuntimeError("the generator was loaded without a state_dir: prompt states cannot be saved")
        request = urllib.request.Request(
            f"{self._server.listening_address}/slots/{slot}?action={action}",
            data=json.dumps({"filename": name}).encode(),
            headers={"Content-Type": "application/json", "Authorization": f"Bearer {self._api_key}"},
        )
        try:
            with urllib.request.urlopen(request, timeout=60) as response:
                return json.loads(response.read())
        except urllib.error.HTTPError as exc:  # llama.cpp's reason is in the body
            reason = exc.read().decode("utf-8", errors="replace")[:500]
            raise RuntimeError(f"llama.cpp could not {action} the prompt state {name}: {exc} {reason}") from exc
        except (urllib.error.URLError, OSError, ValueError) as exc:
            raise RuntimeError(f"llama.cpp could not {action} the prompt state {name}: {exc}") from exc

    def unpin(self) -> None:
        """Forget the pins, scheduled ones included, before the cache is used outside :meth:`chat` (a pin running
        is waited for): each slot's next call re-pins first."""
        with self._lock:
            self._pending.clear()
            self._pinned.clear()

    def settle(self) -> None:
        """Run every scheduled pin now (waiting for one that is running), e.g. before timing the next call."""
        with self._lock:
            for slot in list(self._pending):
                self._run_pending(slot)

    def _schedule_pin(self, prefix: list[dict[str, str]], slot: int) -> None:
        """Pin ``slot`` to ``prefix`` (:meth:`_pin_prefix`) on the background thread, after the current call has
        released the lock; a later call on the slot that comes first runs it before its own work
        (:meth:`_run_pending`). The caller holds the lock."""
        self._pending[slot] = prefix
        self._pinner.submit(self._pin_in_background, slot)

    def _pin_in_background(self, slot: int) -> None:
        with self._lock:
            try:
                self._run_pending(slot)
            except Exception:  # noqa: BLE001 - the next call on the slot pins again (it is no longer pinned)
                log.warning("pinning the model's cache failed; the next call re-pins", exc_info=True)

    def _run_pending(self, slot: int) -> None:
        """Run ``slot``'s scheduled pin, if any (the caller holds the lock). On failure the slot counts as not
        pinned, so its next call pins first."""
        prefix = self._pending.pop(slot, None)
        if prefix is not None:
            self._pinned.discard(slot)
            self._pin_prefix(prefix, slot)

    def _pin_prefix(self, prefix: list[dict[str, str]], slot: int) -> None:
        """Leave only ``prefix`` (a prompt's fixed leading messages: the system prompt and any worked example) and
        the empty user turn's header in ``slot``'s KV cache. One tiny completion whose prompt shares exactly that
        prefix with every question's prompt (its new tokens are evaluated once; 1 generated). The caller holds the
        lock."""
        self._read_prompt([*prefix, {"role": "user", "content": ""}], slot)
        self._pinned.add(slot)

    def _read_prompt(self, messages: list[dict[str, str]], slot: int) -> dict[str, Any]:
        """One greedy completion of 1 token over ``messages`` in ``slot``, which leaves their prompt in its cache;
        llama.cpp's response. The caller holds the lock."""
        return self._server.handle_chat_completions(
            {"messages": messages, "max_tokens": 1, "temperature": 0.0, "seed": 0, "cache_prompt": True,
             "id_slot": slot})

    def _stream(self, request: dict[str, Any], on_delta: Callable[[str], bool | None]) -> Completion:
        pieces: list[str] = []
        final: dict[str, Any] = {}
        errors: list[Any] = []
        started = time.perf_counter()

        def callback(chunk: Any) -> bool:
            if isinstance(chunk, dict) and "error" in chunk:
                errors.append(chunk["error"])
                return True
            choice = chunk["choices"][0] if isinstance(chunk, dict) and chunk.get("choices") else {}
            text = (choice.get("delta") or {}).get("content")
            if choice.get("finish_reason"):
                final.update(chunk, finish_reason=choice["finish_reason"])
            if text:
                pieces.append(text)
                return bool(on_delta(text))
            return False

        self._server.handle_chat_completions({**request, "stream": True}, callback)
        if errors:
            raise RuntimeError(f"generation failed: {errors[0]}")
        if not final:  # stopped early by the caller
            elapsed = (time.perf_counter() - started) * 1000
            final = {"finish_reason": "stop", "timings": {"predicted_ms": elapsed}}
        return _completion("".join(pieces), final["finish_reason"], final)


def _speculative_params(xllamacpp: Any, params: Any, decoding: Decoding, threads: int) -> None:
    """Set ``params.speculative`` (xllamacpp's ``CommonParamsSpeculative``) for ``decoding``.

    The sub-structures are llama.cpp's ``common_params_speculative``: ``ngram_simple`` / ``ngram_map_k`` /
    ``ngram_map_k4v`` (size_n, size_m, min_hits), ``ngram_mod`` (n_match, n_min, n_max) and ``draft`` (the draft
    model's path, n_max, n_min, p_min, threads). They are set at load: the server takes no per-request override.

    Raises:
        FileNotFoundError: ``speculative="draft"`` without an existing ``draft_model``.
        ValueError: a size out of llama.cpp's range.
    """
    if not 1 <= decoding.ngram_n <= 1024 or not 1 <= decoding.draft_max <= 1024 or decoding.draft_min < 0:
        raise ValueError(f"speculative sizes out of range: n={decoding.ngram_n}, max={decoding.draft_max}, "
                         f"min={decoding.draft_min}")
    kind = xllamacpp.common_speculative_type
    spec = params.speculative
    if decoding.speculative == "draft":
        if decoding.draft_model is None or not Path(decoding.draft_model).is_file():
            raise FileNotFoundError(f"draft model not found: {decoding.draft_model}")
        spec.types = [kind.COMMON_SPECULATIVE_TYPE_DRAFT_SIMPLE]
        spec.draft.mparams.path = str(decoding.draft_model)
        spec.draft.n_max = decoding.draft_max
        spec.draft.n_min = decoding.draft_min
        spec.draft.p_min = decoding.draft_p_min
        spec.draft.cpuparams.n_threads = threads
        spec.draft.cpuparams_batch.n_threads = decoding.threads_batch or threads
    elif decoding.speculative == "ngram-mod":
        spec.types = [kind.COMMON_SPECULATIVE_TYPE_NGRAM_MOD]
        spec.ngram_mod.n_match = decoding.ngram_n
        spec.ngram_mod.n_max = decoding.draft_max
        spec.ngram_mod.n_min = min(decoding.draft_min, decoding.draft_max)
    else:
        name = decoding.speculative.replace("-", "_")  # ngram_simple, ngram_map_k, ngram_map_k4v
        spec.types = [getattr(kind, f"COMMON_SPECULATIVE_TYPE_{name.upper()}")]
        sizes = getattr(spec, name)
        sizes.size_n = decoding.ngram_n
        sizes.size_m = decoding.draft_max
        sizes.min_hits = decoding.min_hits
    params.speculative = spec


def _completion(text: str, finish_reason: str, response: dict[str, Any]) -> Completion:
    timings = response.get("timings", {})
    usage = response.get("usage", {})
    return Completion(
        text=text,
        prompt_tokens=int(usage.get("prompt_tokens", timings.get("prompt_n", 0))),
        completion_tokens=int(usage.get("completion_tokens", timings.get("predicted_n", 0))),
        prompt_ms=float(timings.get("prompt_ms", 0.0)),
        generate_ms=float(timings.get("predicted_ms", 0.0)),
        finish_reason=finish_reason or "stop",
        draft_tokens=int(timings.get("draft_n", 0)),
        draft_accepted=int(timings.get("draft_n_accepted", 0)),
    )


def _top_logprobs(choice: dict[str, Any]) -> tuple[dict[str, float], ...]:
    """Per generated token, ``{token text: logprob}`` of the alternatives llama.cpp reported (OpenAI's
    ``choices[0].logprobs.content[i].top_logprobs``); the most likely spelling wins where two share a text."""
    positions = (choice.get("logprobs") or {}).get("content") or []
    out = []
    for position in positions:
        alternatives: dict[str, float] = {}
        for alt in position.get("top_logprobs", []):
            alternatives.setdefault(alt["token"], float(alt["logprob"]))
        out.append(alternatives)
    return tuple(out)
