"""Saved prompt states (llama.cpp slot files) are saved whole or not at all, and a state cut short is never restored:
llama.cpp aborts the process on restoring a truncated state (``GGML_ASSERT(nread <= state_size)``). The model is not
the subject here: the generator's llama.cpp calls are replaced by a stand-in that writes the slot file."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from citerag.service.generator import STATE_SIZE_SUFFIX, Generator


def _generator(state_dir: Path, write: int, report: int | None = None, fail: bool = False) -> Generator:
    """A generator whose llama.cpp save writes ``write`` bytes to the named file and reports ``report`` written."""
    generator = object.__new__(Generator)
    generator.state_dir = state_dir
    generator.fixed_messages = 1
    generator._lock = threading.RLock()  # noqa: SLF001
    generator._pending = {}  # noqa: SLF001
    generator._pin_prefix = lambda messages, slot: None  # noqa: SLF001
    generator._read_prompt = lambda messages, slot: {}  # noqa: SLF001

    def slot_action(slot: int, action: str, name: str) -> dict:
        (state_dir / name).write_bytes(b"s" * write)
        if fail:
            raise RuntimeError("llama.cpp could not save the prompt state")
        return {"n_written": write if report is None else report}

    generator._slot_action = slot_action  # noqa: SLF001
    return generator


def test_a_saved_state_is_renamed_into_place_with_its_size_recorded(tmp_path: Path) -> None:
    generator = _generator(tmp_path, write=1000)
    messages = [{"role": "system", "content": "s"}, {"role": "user", "content": "u"}]
    generator.read_and_save(messages, "paper-a.bin")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["paper-a.bin", f"paper-a.bin{STATE_SIZE_SUFFIX}"]
    assert (tmp_path / f"paper-a.bin{STATE_SIZE_SUFFIX}").read_text() == "1000" and generator.has_state("paper-a.bin")


@pytest.mark.parametrize(("write", "report", "fail"), [(600, 1000, False), (600, None, True)])
def test_a_save_cut_short_or_refused_leaves_nothing(tmp_path: Path, write: int, report: int | None,
                                                    fail: bool) -> None:
    generator = _generator(tmp_path, write=write, report=report, fail=fail)
    with pytest.raises(RuntimeError):
        generator.read_and_save([{"role": "user", "content": "u"}], "paper-a.bin")
    assert list(tmp_path.iterdir()) == [] and not generator.has_state("paper-a.bin")


def test_a_state_is_saved_only_when_its_file_holds_the_recorded_bytes(tmp_path: Path) -> None:
    generator = _generator(tmp_path, write=1000)
    generator.read_and_save([{"role": "user", "content": "u"}], "paper-a.bin")
    state, record = tmp_path / "paper-a.bin", tmp_path / f"paper-a.bin{STATE_SIZE_SUFFIX}"
    state.write_bytes(b"s" * 500)  # truncated after the save (a damaged copy)
    assert not generator.has_state("paper-a.bin")
    state.write_bytes(b"s" * 1000)
    assert generator.has_state("paper-a.bin")
    record.write_text("not a size")
    assert not generator.has_state("paper-a.bin")
    record.unlink()  # a state from before sizes were recorded: read again once
    assert not generator.has_state("paper-a.bin")
