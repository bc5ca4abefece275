"""The OpenAI-compatible endpoint, driven by the official openai client (over the app's real HTTP interface)."""

from __future__ import annotations

import openai
import pytest

from tests.conftest import EDEN

pytestmark = pytest.mark.slow
QUESTION = "How many parameters does the largest metagenomic foundation model have?"


@pytest.fixture(scope="module")
def client(api_client) -> openai.OpenAI:
    # TestClient is an httpx.Client bound to the app: the openai client sends real HTTP requests through it.
    return openai.OpenAI(base_url="http://testserver/v1", api_key="unused", http_client=api_client)


def test_models(client: openai.OpenAI) -> None:
    assert [m.id for m in client.models.list()] == ["citerag"]


def test_chat_completion_with_citations(client: openai.OpenAI) -> None:
    response = client.chat.completions.create(
        model="citerag",
        messages=[{"role": "system", "content": "Be brief."}, {"role": "user", "content": QUESTION}],
        temperature=0.7,  # accepted, ignored: decoding is greedy
    )
    text = response.choices[0].message.content
    assert "28 billion" in text and "[1]" in text
    extra = response.model_extra
    assert [c["doc_id"] for c in extra["citations"]] == [EDEN]
    assert extra["citerag"]["abstained"] is False


def test_streamed_chat_completion(client: openai.OpenAI) -> None:
    stream = client.chat.completions.create(model="citerag", messages=[{"role": "user", "content": QUESTION}],
                                            stream=True)
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks)
    assert "28 billion" in text
    last = chunks[-1]
    assert last.choices[0].finish_reason == "stop"
    assert [c["doc_id"] for c in last.model_extra["citations"]] == [EDEN]


def test_off_corpus_question_abstains_in_the_stream(client: openai.OpenAI) -> None:
    stream = client.chat.completions.create(
        model="citerag", messages=[{"role": "user", "content": "Who won the 2018 FIFA World Cup?"}], stream=True
    )
    text = "".join(c.choices[0].delta.content or "" for c in stream)
    assert text == "Not found in the indexed abstracts."


def test_no_user_message_is_a_422(api_client) -> None:
    response = api_client.post("/v1/chat/completions", json={"messages": [{"role": "system", "content": "x"}]})
    assert response.status_code == 422
    assert response.json()["detail"][0]["loc"] == ["body", "messages"]


GP_EQUIFLOW = "0e4a7d0dfa0b289b"  # doc_id of the GP-EquiFlow abstract


def test_a_three_turn_conversation_cites_the_paper_the_thread_is_about(client: openai.OpenAI) -> None:
    # issue 18: "What does it use to build its priors?" after GP-EquiFlow was answered from another paper
    messages: list[dict] = []
    for question in ("What does GP-EquiFlow do?", "Which systems does it predict trajectories of?",
                     "What does it use to build its priors?"):
        messages.append({"role": "user", "content": question})
        response = client.chat.completions.create(model="citerag", messages=messages)
        messages.append({"role": "assistant", "content": response.choices[0].message.content})
    extra = response.model_extra
    assert extra["question_used"] == "What does GP-EquiFlow use to build its priors?"
    assert extra["citerag"]["question"] == "What does it use to build its priors?"
    assert [c["doc_id"] for c in extra["citations"]] == [GP_EQUIFLOW]
    assert "Gaussian process" in response.choices[0].message.content
