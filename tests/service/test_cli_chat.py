"""``citerag chat``: a conversation at the terminal over a stand-in answerer (no index, no model), through typer's
runner and through a real pseudo-terminal (stdlib ``pty``; pexpect is not installed)."""

from __future__ import annotations

import fcntl
import os
import select
import signal
import subprocess
import sys
import termios
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from citerag.service.cli import app
from citerag.service.library import Library
from tests.conftest import ROOT
from tests.service.answering.fixed import result

GP = "0e4a7d0dfa0b289b"
TEXT = "We employ vector-valued Gaussian processes to construct SE(3)-equivariant prior distributions."
STAND_IN = f'''
from tests.service.answering.fixed import StandInRecipe, result, stand_in_pipeline


def say(question):
    """Cites the GP-EquiFlow sentence when the question answered names GP-EquiFlow, else abstains."""
    return "GP-EquiFlow uses vector-valued Gaussian processes" if "GP-EquiFlow" in question.text else None


class StandIn:
    """The real analyse and retrieve steps (follow-ups made standalone) over the GP-EquiFlow sentence, then a
    stand-in recipe that records what it was asked (the standalone question and the documents kept)."""

    def __new__(cls):
        recipe = StandInRecipe(say)
        pipeline = stand_in_pipeline(recipe, [result("{GP}", {TEXT!r}, title="GP-EquiFlow")])
        pipeline.recipe = recipe
        return pipeline
'''


@pytest.fixture()
def stand_in(monkeypatch):  # noqa: ANN201
    namespace: dict = {}
    exec(STAND_IN, namespace)  # noqa: S102 - the same stand-in the pseudo-terminal test runs in its child
    answerer = namespace["StandIn"]()
    answerer.asked = answerer.recipe.asked
    monkeypatch.setattr("citerag.service.cli._open_library", lambda settings: Library(None, lambda: answerer))
    return answerer


def test_chat_reads_follow_ups_with_the_conversation_and_leaves_at_end_of_input(stand_in, tmp_path) -> None:
    out = CliRunner().invoke(app, ["chat", "--index-dir", str(tmp_path)],
                             input="What does GP-EquiFlow do?\n\nWhat does it use to build its priors?\n")
    assert out.exit_code == 0, out.output
    assert stand_in.asked == [("What does GP-EquiFlow do?", ()),
                              ("What does GP-EquiFlow use to build its priors?", (GP,))]
    assert "answering: What does GP-EquiFlow use to build its priors?" in out.stdout
    assert out.stdout.count("GP-EquiFlow uses vector-valued Gaussian processes") == 4  # streamed + checked, x2
    assert out.stdout.count("GP-EquiFlow uses vector-valued Gaussian processes [1].") == 2  # checked: cited
    assert out.stdout.count("│ [1] │ GP-EquiFlow") == 2  # the sources table of each turn


def test_chat_bad_k_exits_2_before_loading_anything(tmp_path) -> None:
    out = CliRunner().invoke(app, ["chat", "--k", "0", "--index-dir", str(tmp_path)])
    assert out.exit_code == 2 and out.stderr.startswith("error: k: ")


def test_chat_in_a_pseudo_terminal_two_turns_ctrl_c_then_ctrl_d() -> None:
    script = STAND_IN + (
        "\nimport citerag.service.cli as cli\n"
        "from citerag.service.library import Library\n"
        "cli._open_library = lambda settings: Library(None, lambda: StandIn())\n"
        "cli.app(['chat'], prog_name='citerag')\n"
    )
    master, slave = os.openpty()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), *sys.path]), "COLUMNS": "200", "TERM": "dumb"}
    def as_at_a_terminal() -> None:
        """In the child: a session of its own whose controlling terminal is the pty, so Ctrl-C there is a SIGINT,
        and SIGINT handled as in a shell-started process: an ignored disposition and a blocked mask are inherited
        through exec, and a test process may hold either (a library's thread or handler), which would leave
        the chat deaf to Ctrl-C."""
        fcntl.ioctl(0, termios.TIOCSCTTY, 0)
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})

    child = subprocess.Popen([sys.executable, "-c", script], stdin=slave, stdout=slave, stderr=slave, env=env,
                             cwd=ROOT, close_fds=True, start_new_session=True, preexec_fn=as_at_a_terminal)
    os.close(slave)
    def state() -> str:
        """The child's signal state and where it waits, for a failure message."""
        try:
            status = Path(f"/proc/{child.pid}/status").read_text().splitlines()
            wchan = Path(f"/proc/{child.pid}/wchan").read_text()
        except OSError as exc:
            return f"child gone ({exc}), exit {child.poll()}"
        return f"child {[line for line in status if line.startswith(('State', 'Sig'))]}, waiting in {wchan!r}"

    seen = b""  # output not yet consumed by a read_until
    transcript = b""  # everything the chat wrote

    def read_until(marker: bytes, timeout: float = 180.0) -> None:  # a busy machine starts slowly
        """Read until ``marker`` appears in output not yet consumed, then consume it and what preceded it (a
        marker already seen, e.g. an earlier prompt, never satisfies a later wait)."""
        nonlocal seen, transcript
        deadline = time.monotonic() + timeout
        while marker not in seen:
            assert time.monotonic() < deadline, f"no {marker!r} in {seen.decode(errors='replace')!r}; {state()}"
            if select.select([master], [], [], 0.2)[0]:
                try:
                    chunk = os.read(master, 65536)
                except OSError:  # the child closed the terminal
                    break
                seen += chunk
                transcript += chunk
        seen = seen[seen.index(marker) + len(marker):] if marker in seen else b""

    try:
        read_until(b"> ")
        os.write(master, b"What does GP-EquiFlow do?\n")
        read_until(b"timings (ms)")
        read_until(b"> ")
        os.write(master, b"What does it use to build its priors?\n")
        read_until(b"timings (ms)")
        assert b"answering: What does GP-EquiFlow use to build its priors?" in transcript
        read_until(b"> ")  # the prompt after the second answer (the chat is back in its prompt)
        os.write(master, b"\x03")  # Ctrl-C at the prompt: a fresh prompt, the chat goes on
        read_until(b"> ")
        assert child.poll() is None
        os.write(master, b"\x04")  # Ctrl-D at the prompt
        assert child.wait(timeout=30) == 0
    finally:
        if child.poll() is None:
            child.kill()
        os.close(master)


@pytest.mark.slow
def test_chat_over_the_real_index_and_model_answers_a_follow_up(seed_settings) -> None:
    out = CliRunner().invoke(app, ["chat", "--index-dir", str(seed_settings.index_dir)],
                             input="What does GP-EquiFlow do?\n\nWhat does it use to build its priors?\n")
    assert out.exit_code == 0, out.output
    follow_up = out.stdout.split("answering: What does GP-EquiFlow use to build its priors?", 1)
    assert len(follow_up) == 2, out.stdout  # the follow-up was answered as the standalone question
    assert "Gaussian process" in follow_up[1] and "N-body" in follow_up[1]  # GP-EquiFlow's abstract, cited


@pytest.mark.slow
def test_chat_with_server_sends_the_conversation_to_the_running_service(live_server) -> None:
    # the same follow-up, through the service: the history travels in /ask's body and is read there
    out = CliRunner().invoke(app, ["chat", "--server", live_server],
                             input="What does GP-EquiFlow do?\n\nWhat does it use to build its priors?\n")
    assert out.exit_code == 0, out.output
    follow_up = out.stdout.split("answering: What does GP-EquiFlow use to build its priors?", 1)
    assert len(follow_up) == 2, out.stdout
    assert "Gaussian process" in follow_up[1] and "N-body" in follow_up[1]
