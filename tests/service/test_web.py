"""The web page at ``/`` in a real browser: Debian's chromium driven by Playwright, against the real service (real
index, embedder and generator) served by uvicorn over HTTP. ``make test`` installs chromium when it is missing."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from playwright.sync_api import Browser, Page, sync_playwright

from tests.conftest import EDEN, ROOT, serving

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"]
SCREENSHOT = ROOT / "tests" / "artifacts" / "web.png"
WAIT_MS = 600_000  # a guard against a hung page, not a latency check: generation on a busy CPU is slow
# Records the answer's text after every change of the answer box (the growing draft above the evidence while it
# streams), with the page state at that moment (installed before app.js runs).
RECORD_ANSWER = """
window.__answerSnapshots = [];
document.addEventListener("DOMContentLoaded", () => {
  const answer = document.getElementById("answer");
  new MutationObserver(() => window.__answerSnapshots.push(
    [document.getElementById("app").dataset.state, (answer.querySelector(".draft") || answer).textContent],
  )).observe(answer, { childList: true, characterData: true, subtree: true });
});
"""
HOSTILE_TITLE = "<img src=x onerror=\"window.__pwned='title'\">Hostile title"
HOSTILE_TEXT = (
    "An abstract about protein folding with markup <script>window.__pwned='script'</script> and "
    "<img src=x onerror=\"window.__pwned='img'\"> inside its text."
)
# Markup that latex2mathml would carry into MathML (an unescaped \text{}, an \href attribute) and Markdown emphasis
# around tags: the display form's HTML must keep none of it.
HOSTILE_MATH = (
    "Protein folding energy is $E = \\text{<img src=x onerror=\"window.__pwned='math'\">} mc^2$ and "
    "**<img src=x onerror=\"window.__pwned='bold'\">** here, with $\\href{javascript:window.__pwned='href'}{x}$ "
    "and $\\style{background:url(x)}{y}$ folding."
)
ASMC_QUESTION = "What exact-match accuracy and p95 latency does adaptive sequential Monte Carlo reach on MATH500?"
MATH_SCREENSHOT = ROOT / "tests" / "artifacts" / "web-math.png"
# The stored spans of the opened abstract's pieces, in order: [data-s, data-e, inside the <mark>].
PIECES = """() => {
  const text = document.getElementById("passage-text");
  const pieces = [];
  for (const node of text.children) {
    const inner = node.tagName === "MARK" ? Array.from(node.children) : [node];
    for (const piece of inner) pieces.push([Number(piece.dataset.s), Number(piece.dataset.e), node.tagName === "MARK"]);
  }
  return { pieces, loose: text.childNodes.length - text.children.length,
           mark: [Number(text.querySelector("mark").dataset.s), Number(text.querySelector("mark").dataset.e)] };
}"""


def test_page_and_its_assets_come_from_the_app_itself(settings_factory) -> None:
    from fastapi.testclient import TestClient

    from citerag.service.api import create_app
    from citerag.service.web import CONTENT_SECURITY_POLICY

    client = TestClient(create_app(settings_factory()))  # no `with`: the lifespan (index, models) does not run
    page = client.get("/")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert page.headers["content-security-policy"] == CONTENT_SECURITY_POLICY
    assets = re.findall(r'(?:src|href)="([^"]+)"', page.text)
    assert sorted(assets) == ["/static/app.js", "/static/style.css"]  # no CDN, nothing from another origin
    types = {asset: client.get(asset).headers["content-type"] for asset in assets}
    assert types["/static/app.js"].startswith("text/javascript") and types["/static/style.css"].startswith("text/css")
    assert "innerHTML" not in client.get("/static/app.js").text
    assert client.get("/static/missing.js").status_code == 404
    paths = client.get("/openapi.json").json()["paths"]
    assert "/" not in paths and not any(path.startswith("/static") for path in paths)


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    if not CHROMIUM.exists():
        pytest.fail(f"{CHROMIUM} is missing: `make test` installs it, or run `apt-get install -y chromium`")
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        yield browser
        browser.close()


@pytest.fixture
def page(browser: Browser) -> Iterator[Page]:
    context = browser.new_context(viewport={"width": 1000, "height": 900})
    context.set_default_timeout(WAIT_MS)
    page = context.new_page()
    page.add_init_script(RECORD_ANSWER)
    errors: list[Exception] = []
    page.on("pageerror", lambda error: errors.append(error))
    yield page
    context.close()
    assert errors == [], f"JavaScript errors on the page: {errors}"


@pytest.fixture(scope="module")
def hostile_server(settings_factory, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The real service over a two-document corpus whose title and text hold HTML that must never run."""
    from citerag.service.api import create_app

    corpus = tmp_path_factory.mktemp("hostile") / "hostile.jsonl"
    docs = [
        {"id": "hostile", "title": HOSTILE_TITLE, "text": HOSTILE_TEXT},
        {"id": "hostile-math", "title": "Hostile math", "text": HOSTILE_MATH},
        {"id": "benign", "title": "Benign", "text": "A plain abstract about graph neural networks for molecules."},
    ]
    corpus.write_text("".join(json.dumps(d) + "\n" for d in docs), encoding="utf-8")
    with serving(create_app(settings_factory(corpus=[corpus]))) as url:
        yield url


def ask(page: Page, base_url: str, question: str, mode: str = "hybrid", k: int = 5) -> dict:
    """Ask from the page by keyboard (Enter in the question box); wait until the answer is done.

    Returns:
        The final ``answer`` event the page received (the API's AskResponse), plus ``tokens``: the streamed texts.
    """
    page.goto(base_url + "/")
    page.get_by_label("Question").fill(question)
    page.get_by_label(mode, exact=True).check()
    page.get_by_label("Passages (k)").fill(str(k))
    with page.expect_response(lambda r: r.url == base_url + "/ask") as ask_response:
        page.get_by_label("Question").press("Enter")
    page.wait_for_selector("#app[data-state=done], #app[data-state=error]")
    assert page.locator("#app").get_attribute("data-state") == "done", page.get_by_role("status").inner_text()
    events = [block.split("\n", 1) for block in ask_response.value.text().strip().split("\n\n")]
    data = [(name.removeprefix("event: "), json.loads(body.removeprefix("data: "))) for name, body in events]
    final = next(body for name, body in data if name == "answer")
    return {**final, "tokens": [body["text"] for name, body in data if name == "token"]}


@pytest.mark.slow
def test_streams_a_cited_answer_and_highlights_the_cited_span(page: Page, live_server: str) -> None:
    result = ask(page, live_server, "How many parameters does EDEN have?")
    assert result["abstained"] is False, result["reason"]

    # the composed answer was streamed (one token event) and shown while streaming
    raw = "".join(result["tokens"])
    streamed = [text for state, text in page.evaluate("window.__answerSnapshots") if state == "streaming" and text]
    assert result["tokens"] and streamed and all(raw.startswith(text) for text in streamed)

    # the final answer replaces the streamed text; each citation is a button; the evidence the model read follows,
    # the stated sentences in bold, each with a button opening its span
    shown = page.locator("#answer > p").first.inner_text()
    assert shown == result["answer"] and "28" in shown
    eden = next(c for c in result["citations"] if c["doc_id"] == EDEN)
    answer_buttons = page.locator("#answer > p button.cite").all_inner_texts()
    assert answer_buttons == [f"[{c['n']}]" for c in result["citations"]]
    evidence = page.locator("#answer ol.evidence li")
    assert evidence.count() == len(result["evidence"]) > 0
    used = [e["text"] for e in result["evidence"] if e["used"]]
    assert page.locator("#answer ol.evidence li.used strong").all_inner_texts() == used
    assert page.get_by_role("status").inner_text().startswith("Answered in ")

    # sources: the retrieved blocks (top-5 passages, same-document ones merged), with their ranks
    sources = page.locator("#sources li")
    assert sources.count() == len(result["passages"]) <= 5
    first = result["passages"][0]
    assert first["doc_id"] == EDEN
    assert sources.first.inner_text() == (
        f"[1] {first['title']} bm25 #{first['bm25_rank']} · dense #{first['dense_rank']} · fused #1"
    )

    # clicking the citation shows the full EDEN abstract with exactly the cited span marked
    page.locator("#answer > p button.cite", has_text=f"[{eden['n']}]").click()
    mark = page.locator("#passage mark")
    mark.wait_for()
    document = httpx.get(f"{live_server}/documents/{EDEN}").json()
    assert page.locator("#passage-text").inner_text() == document["text"]
    assert mark.inner_text() == eden["text"] == document["text"][eden["start"] : eden["end"]]
    assert "28" in mark.inner_text()
    assert page.evaluate("document.activeElement.id") == "passage"  # focus follows, for keyboard users

    SCREENSHOT.parent.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENSHOT), full_page=True)


@pytest.mark.slow
def test_abstention_is_stated_with_its_reason(page: Page, live_server: str) -> None:
    result = ask(page, live_server, "Who won the 2018 FIFA World Cup?")
    assert result["abstained"] is True and result["citations"] == []
    assert page.locator("#answer p").first.inner_text() == "Not found in the indexed abstracts."
    assert page.locator("#answer .reason").inner_text() == f"The service abstained: {result['reason']}."
    assert page.locator("#answer > p button.cite").count() == 0  # nothing cited; the evidence read is listed below


@pytest.mark.slow
def test_document_markup_is_shown_as_text_never_run(page: Page, hostile_server: str) -> None:
    ask(page, hostile_server, "protein folding markup", mode="bm25", k=2)
    assert page.locator("#sources-note").inner_text() == "Passages ranked by a bm25 search for the question."
    source = page.locator("#sources button.source").first
    assert source.inner_text() == f"#1 {HOSTILE_TITLE}"

    source.click()
    page.locator("#passage mark").wait_for()
    assert page.locator("#passage-text").inner_text() == HOSTILE_TEXT
    assert page.locator("#passage-title").inner_text() == f"{HOSTILE_TITLE} (hostile)"
    assert page.locator("main img, main script").count() == 0
    assert page.evaluate("window.__pwned") is None

    # a formula and emphasis carrying tags, a javascript: URL and a style: rendered as math and text, nothing more
    page.locator("#sources button.source", has_text="Hostile math").click()
    page.locator("#passage-title", has_text="hostile-math").wait_for()  # (wait_for_function: the CSP forbids eval)
    assert page.locator("#passage-text math").count() == 3
    assert "<img src=x" in page.locator("#passage-text strong").inner_text()  # the bold tag shown as text
    attributes = page.evaluate(
        "Array.from(document.querySelectorAll('#passage-text *')).flatMap(e => Array.from(e.attributes, a => a.name))")
    assert set(attributes) <= {"data-s", "data-e", "display", "stretchy", "mathvariant", "lspace", "rspace"}
    assert page.locator("main img, main script, main iframe, main a").count() == 0
    assert page.evaluate("window.__pwned") is None


@pytest.mark.slow
def test_math_is_rendered_as_mathml_and_the_highlight_covers_exactly_the_cited_characters(
    page: Page, live_server: str
) -> None:
    page.context.grant_permissions(["clipboard-read", "clipboard-write"], origin=live_server)
    result = ask(page, live_server, ASMC_QUESTION, k=8)
    assert result["abstained"] is False, result["reason"]

    # the answer and the evidence read as a paper does: 80.6%, never LaTeX's 80.6\%
    answer = page.locator("#answer > p.answer-text").inner_text()
    assert "80.6%" in answer and "\\" not in answer and answer == result["answer_display"]["text"]
    evidence = page.locator("#answer ol.evidence").text_content()
    assert "\\%" not in evidence and "\\times" not in evidence and "$" not in evidence

    # the cited sentence inside the whole abstract, math as MathML, exactly the cited characters marked
    citation = next(c for c in result["citations"] if "80.6" in c["text"])
    page.locator("#answer > p button.cite", has_text=f"[{citation['n']}]").first.click()
    page.locator("#passage mark").wait_for()
    document = httpx.get(f"{live_server}/documents/{citation['doc_id']}").json()
    assert document["text"][citation["start"] : citation["end"]] == citation["text"]
    assert page.locator("#passage-text math").count() == 3  # every formula of the ASMC abstract
    shown = page.locator("#passage-text").text_content()
    assert "80.6%" in shown and "128×" in shown and "p95 =1318s" in shown and "\\" not in shown
    layout = page.evaluate(PIECES)
    pieces = layout["pieces"]
    assert layout["loose"] == 0  # every character shown belongs to a piece
    assert [p[0] for p in pieces[1:]] == [p[1] for p in pieces[:-1]]  # contiguous ...
    assert (pieces[0][0], pieces[-1][1]) == (0, len(document["text"]))  # ... over the whole stored text
    marked = [p for p in pieces if p[2]]
    assert layout["mark"] == [citation["start"], citation["end"]] == [marked[0][0], marked[-1][1]]
    assert "80.6%" in page.locator("#passage mark").text_content()

    # "Copy with references": the answer with one numbered reference per cited passage
    page.get_by_role("button", name="Copy with references").first.click()
    page.locator("#status", has_text="Copied the answer").wait_for()
    assert page.evaluate("navigator.clipboard.readText()") == result["markdown"]
    assert f'"{citation["text"]}"' in result["markdown"]

    MATH_SCREENSHOT.parent.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(MATH_SCREENSHOT), full_page=True)


@pytest.fixture(scope="module")
def echo_server() -> Iterator[tuple[str, object]]:
    """Stands for retrieval and answering (no index, no model): answers "Answer to: <question answered>", streams
    it, and records the documents the analyse step kept for a follow-up."""
    from tests.service.answering.fixed import StandInRecipe, result, stand_in_pipeline
    from tests.service.test_streaming import app_over

    recipe = StandInRecipe(lambda question: f"Answer to: {question.text}")
    answerer = stand_in_pipeline(recipe, [result("gp", "GP-EquiFlow builds priors from Gaussian processes.")])
    with serving(app_over(answerer), lifespan="off") as url:
        yield url, recipe


def ask_on_page(page: Page, question: str) -> dict:
    """Ask ``question`` on the page as it is (no reload); the ``/ask`` request body the page sent."""
    page.get_by_label("Question").fill(question)
    with page.expect_request(lambda r: r.url.endswith("/ask")) as request:
        page.get_by_label("Question").press("Enter")
    page.wait_for_selector("#app[data-state=done], #app[data-state=error]")
    assert page.locator("#app").get_attribute("data-state") == "done", page.get_by_role("status").inner_text()
    return request.value.post_data_json


def test_a_follow_up_is_sent_with_the_thread_which_survives_a_reload(page: Page, echo_server) -> None:
    url, _ = echo_server
    page.goto(url + "/")
    first = ask_on_page(page, "What does GP-EquiFlow do?")
    assert first["history"] == []
    second = ask_on_page(page, "What does it use to build its priors?")
    assert second["history"] == [
        {"role": "user", "content": "What does GP-EquiFlow do?"},
        {"role": "assistant", "content": "Answer to: What does GP-EquiFlow do? [1].", "doc_ids": ["gp"]},
    ]
    # the answer box shows the latest turn and the standalone question it answered; the thread the earlier one
    assert page.locator("#asked").inner_text() == ("Q: What does it use to build its priors? (answered as: What does "
                                                   "GP-EquiFlow use to build its priors?)")
    assert page.locator("#answer > p").first.inner_text() == ("Answer to: What does GP-EquiFlow use to build its "
                                                              "priors? [1].")
    assert page.locator("#thread li p").all_inner_texts() == ["Q: What does GP-EquiFlow do?",
                                                              "Answer to: What does GP-EquiFlow do? [1]."]

    page.reload()
    page.wait_for_selector("#app[data-state=done]")
    assert page.locator("#thread li .question").all_inner_texts() == ["Q: What does GP-EquiFlow do?"]
    assert page.locator("#asked .question").inner_text() == "Q: What does it use to build its priors?"
    assert page.get_by_role("status").inner_text() == "Conversation restored (2 turns)."
    third = ask_on_page(page, "Which systems was it tested on?")
    assert [m["content"] for m in third["history"] if m["role"] == "user"] == [
        "What does GP-EquiFlow do?", "What does it use to build its priors?"]
    assert page.locator("#thread > li").count() == 2

    page.get_by_role("button", name="New conversation").click()
    assert page.locator("#thread > li").count() == 0 and page.locator("#answer").inner_text() == ""
    assert ask_on_page(page, "What does it use?")["history"] == []
    page.reload()
    assert page.locator("#thread > li").count() == 0
    assert page.locator("#asked .question").inner_text() == "Q: What does it use?"


@pytest.mark.slow
def test_a_follow_up_on_the_real_service_is_answered_from_the_thread_s_paper(page: Page, live_server: str) -> None:
    first = ask(page, live_server, "What does GP-EquiFlow do?")
    assert first["abstained"] is False, first["reason"]
    paper = {c["doc_id"] for c in first["citations"]}
    # ask() opens the page again: the thread comes back from the browser's storage and is sent as history
    second = ask(page, live_server, "What does it use to build its priors?")
    assert second["question_used"] == "What does GP-EquiFlow use to build its priors?"
    assert {c["doc_id"] for c in second["citations"]} == paper and "Gaussian process" in second["answer"]
    page.reload()
    page.wait_for_selector("#app[data-state=done]")
    assert page.locator("#thread li .question").all_inner_texts() == ["Q: What does GP-EquiFlow do?"]
