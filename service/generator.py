"""The local language model: a GGUF file run by llama.cpp through the ``xllamacpp`` prebuilt CPU wheels."""

from __future__ import annotations

import os
import secrets
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any


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
    """

    text: str
    prompt_tokens: int
    completion_tokens: int
    prompt_ms: float
    generate_ms: float
    finish_reason: str
    top_logprobs: tuple[dict[str, float], ...] = ()


class Generator:
    """A chat model loaded once per process; calls are serialised (one slot), so concurrent callers queue.

    llama.cpp keeps the KV cache of the previous prompt, so the shared system-prompt prefix is evaluated once. The
    cache is pinned to that prefix around every call (:meth:`_pin_prefix`): llama.cpp's logits differ slightly
    between evaluating a prompt's tail as one batch and re-using a whole cached prompt (llama.cpp issues #4902,
    #28527), which can change greedy output; with the pin, the same messages always take the same path and give the
    same answer, whatever was asked before.

    Args:
        model_path: a GGUF file.
        n_ctx: context window in tokens.
        threads: CPU threads (0 = all cores).

    Raises:
        FileNotFoundError: ``model_path`` does not exist.
    """

    def __init__(self, model_path: Path, n_ctx: int = 4096, threads: int = 0) -> None:
        import xllamacpp

        if not Path(model_path).is_file():
            raise FileNotFoundError(f"generator model not found: {model_path}")
        params = xllamacpp.CommonParams()
        params.model.path = str(model_path)
        params.n_ctx = n_ctx
        params.n_parallel = 1
        params.cache_prompt = True
        params.verbosity = -1
        n_threads = threads or os.cpu_count() or 2
        params.cpuparams.n_threads = n_threads
        params.cpuparams_batch.n_threads = n_threads
        # xllamacpp also opens llama.cpp's HTTP server on a random loopback port; a random key keeps it private.
        params.api_keys = [secrets.token_hex(16)]
        self.model_path = Path(model_path)
        self.n_ctx = n_ctx
        self._server = xllamacpp.Server(params)
        self._lock = threading.Lock()
        self._pinned = False
        #: Leading messages every prompt shares (system prompt, worked example): what :meth:`_pin_prefix` keeps.
        self.fixed_messages = 1

    def chat(
        self,
        messages: list[dict[str, str]],
        max_tokens: int,
        on_delta: Callable[[str], bool | None] | None = None,
        grammar: str | None = None,
        top_logprobs: int = 0,
        pin: bool = True,
    ) -> Completion:
        """Run one greedy (temperature 0) chat completion.

        Args:
            messages: OpenAI-style ``[{"role": ..., "content": ...}]``.
            max_tokens: generation limit (tokens).
            on_delta: called with each new piece of text as it is generated; return ``True`` to stop early.
            grammar: a llama.cpp GBNF grammar the output must match (``root ::= "yes" | "no"``).
            top_logprobs: how many of each position's most likely tokens to report (0-20; 0 reports none).
            pin: re-pin the KV cache to the system prompt afterwards (:meth:`_pin_prefix`); ``False`` keeps this
                prompt cached for a next call that extends it (two questions about one evidence list).

        Raises:
            RuntimeError: llama.cpp reported an error.
        """
        request: dict[str, Any] = {
            "messages": messages,
            "max_tokens": max_tokens,
            "temperature": 0.0,
            "seed": 0,
            "cache_prompt": True,
        }
        if grammar is not None:
            request["grammar"] = grammar
        if top_logprobs:
            request.update(logprobs=True, top_logprobs=top_logprobs)
        with self._lock:
            if not self._pinned:
                self._pin_prefix(messages)
            try:
                if on_delta is None:
                    response = self._server.handle_chat_completions(request)
                    if "error" in response:
                        raise RuntimeError(f"generation failed: {response['error']}")
                    choice = response["choices"][0]
                    completion = _completion(choice["message"]["content"] or "", choice["finish_reason"], response)
                    if top_logprobs:
                        completion = replace(completion, top_logprobs=_top_logprobs(choice))
                    return completion
                return self._stream(request, on_delta)
            finally:
                if pin:
                    self._pin_prefix(messages)

    def pin(self, messages: list[dict[str, str]]) -> None:
        """Re-pin the cache to ``messages``' system prompt (:meth:`_pin_prefix`) after calls made with
        ``pin=False``, once nothing more will extend their prompt."""
        with self._lock:
            self._pin_prefix(messages)

    def _pin_prefix(self, messages: list[dict[str, str]]) -> None:
        """Leave only the fixed prefix of ``messages`` in the KV cache: its first :attr:`fixed_messages` messages
        (the system prompt and any worked example) and the empty user turn's header. One tiny completion whose
        prompt shares exactly that prefix with every question's prompt (its new tokens are evaluated once; 1
        generated; run after each answer, so it does not delay the next one's first token)."""
        prefix = messages[: self.fixed_messages]
        self._server.handle_chat_completions(
            {"messages": [*prefix, {"role": "user", "content": ""}], "max_tokens": 1, "temperature": 0.0,
             "seed": 0, "cache_prompt": True}
        )
        self._pinned = True

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
