// citerag web page: asks POST /ask with "stream": true and renders its server-sent events (passages, evidence,
// token..., answer | error): the evidence shows as soon as it is chosen and the answer grows above it; citations open the cited span inside the full abstract (GET /documents/{id}).
// The conversation (each turn's question and checked answer) is kept in localStorage and sent as "history", so a
// follow-up is read with it; "New conversation" forgets it. Nothing is kept on the server.
// Document and model text reaches the DOM as text (textContent / append(string)), except the API's display form
// (display.html: math as MathML, emphasis), which the service sanitised (nh3) and which is parsed here by an inert
// DOMParser and kept only as the elements and attributes of an allow-list (safeNodes), never assigned as HTML.
"use strict";

const $ = (id) => document.getElementById(id);
let inFlight = null; // AbortController of the running question
const STORE = "citerag.conversation"; // localStorage key: [{question, body}], body = the final /ask response
const KEPT_TURNS = 20; // turns kept in the browser
const SENT_TURNS = 8; // question + answer pairs sent as history (within CITERAG_HISTORY_MAX_TURNS' default 20)
const SENT_CHARS = 1500; // characters of each message sent

function loadThread() {
  try {
    const turns = JSON.parse(localStorage.getItem(STORE) || "[]");
    return Array.isArray(turns) ? turns.filter((t) => t && typeof t.question === "string" && t.body) : [];
  } catch (_) {
    return [];
  }
}

let thread = loadThread();

function saveThread() {
  thread = thread.slice(-KEPT_TURNS);
  try { localStorage.setItem(STORE, JSON.stringify(thread)); } catch (_) { /* storage full or off: keep it in memory */ }
}

// The /ask "history" for the thread: each turn's question, then its answer with the documents it cited.
function historyOf(turns) {
  return turns.slice(-SENT_TURNS).flatMap((t) => [
    { role: "user", content: t.question.slice(0, SENT_CHARS) },
    { role: "assistant", content: t.body.answer.slice(0, SENT_CHARS),
      doc_ids: [...new Set(t.body.citations.map((c) => c.doc_id))].slice(0, 20) },
  ]);
}

// The display form's elements and attributes (service/display.py sanitises to the same lists): the page's own
// wrappers, and MathML Core's presentation elements with their presentation attributes. No URL, script or style.
const DISPLAY_TAGS = new Set(["span", "strong", "em", "code", "math", "mrow", "mi", "mn", "mo", "ms", "mtext",
  "mspace", "msub", "msup", "msubsup", "mfrac", "msqrt", "mroot", "mover", "munder", "munderover", "mstyle",
  "mpadded", "mphantom", "menclose", "merror", "mtable", "mtr", "mtd", "mmultiscripts", "mprescripts", "none"]);
const DISPLAY_ATTRIBUTES = new Set(["data-s", "data-e", "display", "mathvariant", "displaystyle", "scriptlevel",
  "stretchy", "fence", "separator", "lspace", "rspace", "form", "largeop", "movablelimits", "accent", "accentunder",
  "symmetric", "minsize", "maxsize", "linethickness", "width", "height", "depth", "voffset", "notation",
  "columnalign", "rowalign", "columnspacing", "rowspacing", "columnlines", "rowlines", "frame", "columnspan",
  "rowspan"]);

// Nodes for a display form's HTML: parsed by an inert DOMParser (nothing runs, nothing loads), every element and
// attribute outside the allow-lists removed, then moved into the page.
function safeNodes(html) {
  const body = new DOMParser().parseFromString(`<!doctype html><body>${html}`, "text/html").body;
  const clean = (parent) => {
    for (const node of Array.from(parent.childNodes)) {
      if (node.nodeType === Node.TEXT_NODE) continue;
      if (node.nodeType !== Node.ELEMENT_NODE || !DISPLAY_TAGS.has(node.localName)) {
        node.remove();
        continue;
      }
      for (const attribute of Array.from(node.attributes)) {
        if (!DISPLAY_ATTRIBUTES.has(attribute.name)) node.removeAttribute(attribute.name);
      }
      clean(node);
    }
  };
  clean(body);
  return Array.from(body.childNodes);
}

// A display form's nodes (math as MathML), or the stored text when a response has none.
function displayNodes(display, text) {
  return display && typeof display.html === "string" ? safeNodes(display.html) : [text];
}

function el(tag, text, className) {
  const node = document.createElement(tag);
  if (text !== undefined) node.textContent = text;
  if (className) node.className = className;
  return node;
}

function setState(state, message) {
  $("app").dataset.state = state;
  $("status").textContent = message;
}

// Parse a text/event-stream body (WHATWG HTML "server-sent events"): yields {event, data} with data JSON-decoded.
async function* serverSentEvents(response) {
  const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    buffer += value;
    let cut;
    while ((cut = buffer.indexOf("\n\n")) >= 0) {
      const block = buffer.slice(0, cut);
      buffer = buffer.slice(cut + 2);
      let event = "message";
      const data = [];
      for (const line of block.split("\n")) {
        if (line.startsWith("event:")) event = line.slice(6).trim();
        else if (line.startsWith("data:")) data.push(line.slice(5).replace(/^ /, ""));
      }
      if (data.length) yield { event, data: JSON.parse(data.join("\n")) };
    }
  }
}

async function postJson(path, body, signal) {
  const response = await fetch(path, {
    method: "POST",
    headers: { "Content-Type": "application/json" },
    body: JSON.stringify(body),
    signal,
  });
  if (!response.ok) throw new Error(await problem(response));
  return response;
}

// One line for a failed request: the API's JSON "detail" (a string, or a list of field errors).
async function problem(response) {
  let detail = response.statusText;
  try {
    const body = await response.json();
    detail = Array.isArray(body.detail)
      ? body.detail.map((e) => `${e.loc.slice(1).join(".")}: ${e.msg}`).join("; ")
      : String(body.detail);
  } catch (_) { /* not JSON: keep the status text */ }
  const retry = response.headers.get("Retry-After");
  return `HTTP ${response.status}: ${detail}${retry ? ` (retry in ${retry} s)` : ""}`;
}

// A span showing the stored characters [from, to) as they are, with their offsets.
function storedSpan(chars, from, to) {
  const span = el("span", chars.slice(from, to).join(""));
  span.dataset.s = String(from);
  span.dataset.e = String(to);
  return span;
}

// The document's display form (each top-level piece a span naming its stored span, data-s/data-e) with exactly the
// stored characters [start, end) inside one <mark>. A piece cut by start or end (a formula a citation begins
// inside) is shown as its stored characters, split there. Offsets are Python code points, so the stored text is
// split into code points (Array.from), not UTF-16 units, before slicing.
function markedNodes(doc, start, end) {
  const chars = Array.from(doc.text);
  if (!doc.display) return [chars.slice(0, start).join(""), el("mark", chars.slice(start, end).join("")), chars.slice(end).join("")];
  const before = [];
  const inside = [];
  const after = [];
  for (const node of safeNodes(doc.display.html)) {
    const s = Number(node.dataset && node.dataset.s);
    const e = Number(node.dataset && node.dataset.e);
    if (!Number.isInteger(s) || !Number.isInteger(e)) continue;
    if (e <= start) before.push(node);
    else if (s >= end) after.push(node);
    else if (s >= start && e <= end) inside.push(node);
    else {
      if (s < start) before.push(storedSpan(chars, s, start));
      inside.push(storedSpan(chars, Math.max(s, start), Math.min(e, end)));
      if (e > end) after.push(storedSpan(chars, end, e));
    }
  }
  const mark = el("mark");
  mark.dataset.s = String(start);
  mark.dataset.e = String(end);
  mark.append(...inside);
  return [...before, mark, ...after];
}

// The full abstract, as it reads (math as MathML), with characters [start, end) marked.
async function openPassage(docId, start, end, heading) {
  let doc;
  try {
    const response = await fetch(`/documents/${encodeURIComponent(docId)}`);
    if (!response.ok) throw new Error(await problem(response));
    doc = await response.json();
  } catch (error) {
    setState("error", `Could not open the document: ${error.message}`);
    return;
  }
  $("passage-heading").textContent = heading;
  $("passage-title").textContent = `${doc.label} (${doc.doc_id})`;
  $("passage-text").replaceChildren(...markedNodes(doc, start, end));
  const section = $("passage");
  section.hidden = false;
  section.focus();
}

function citationButton(citation) {
  const button = el("button", `[${citation.n}]`, "cite");
  button.type = "button";
  button.setAttribute("aria-label", `Citation ${citation.n}: open the cited passage of ${citation.title}`);
  button.addEventListener("click", () =>
    openPassage(citation.doc_id, citation.start, citation.end, `Cited passage [${citation.n}]`));
  return button;
}

// Each [n] marker in the text under `root` that has a citation turned into a button.
function citationButtons(root, citations) {
  const byNumber = new Map(citations.map((c) => [c.n, c]));
  const walker = document.createTreeWalker(root, NodeFilter.SHOW_TEXT);
  const texts = [];
  while (walker.nextNode()) texts.push(walker.currentNode);
  for (const text of texts) {
    const marker = /\[(\d+)\]/g;
    const parts = [];
    let last = 0;
    for (let match; (match = marker.exec(text.data)) !== null; last = marker.lastIndex) {
      const citation = byNumber.get(Number(match[1]));
      if (!citation) continue;
      parts.push(text.data.slice(last, match.index), citationButton(citation));
    }
    if (parts.length) text.replaceWith(...parts, text.data.slice(last));
  }
}

// "Copy with references": the answer with its numbered references (paper, document id, cited sentence) as Markdown
// (the API's `markdown`), onto the clipboard.
function copyButton(body) {
  const button = el("button", "Copy with references", "copy");
  button.type = "button";
  button.addEventListener("click", async () => {
    try {
      await navigator.clipboard.writeText(body.markdown);
    } catch (_) { // no clipboard API (a page served over plain HTTP from another host): copy from a text area
      const area = el("textarea");
      area.value = body.markdown;
      document.body.append(area);
      area.select();
      document.execCommand("copy");
      area.remove();
    }
    setState("done", `Copied the answer with ${body.references.length} reference${body.references.length === 1 ? "" : "s"}.`);
  });
  return button;
}

// The checked answer as nodes: the decision, the text as it reads (math as MathML) with each [n] marker that has a
// citation turned into a button, the abstention's reason, "Copy with references", and the evidence the model read.
function answerNodes(body) {
  const nodes = [];
  if (body.decision) nodes.push(el("p", `Decision: ${body.decision}`, "decision"));
  const paragraph = el("p", null, "answer-text");
  paragraph.append(...displayNodes(body.answer_display, body.answer));
  citationButtons(paragraph, body.citations);
  nodes.push(paragraph);
  if (body.abstained) nodes.push(el("p", `The service abstained: ${body.reason}.`, "reason"));
  if (body.markdown && !body.abstained) nodes.push(copyButton(body));
  return nodes.concat(evidenceNodes(body.evidence || []));
}

function renderAnswer(body) {
  const answer = $("answer");
  answer.replaceChildren(...answerNodes(body));
  answer.classList.toggle("abstained", body.abstained);
}

// "Q: ..." and, when the follow-up was rewritten, the standalone question that was answered.
function askedNodes(question, body) {
  const nodes = [el("span", `Q: ${question}`, "question")];
  if (body && body.question_used && body.question_used !== question) {
    nodes.push(el("span", ` (answered as: ${body.question_used})`, "question-used"));
  }
  return nodes;
}

// The first `count` turns of the thread (default: all but the latest, which the answer box shows), each with its
// question, answer and evidence.
function renderThread(count = thread.length - 1) {
  const earlier = thread.slice(0, Math.max(count, 0));
  $("thread-section").hidden = earlier.length === 0;
  $("thread").replaceChildren(...earlier.map((turn) => {
    const item = el("li", null, "turn");
    item.append(el("p", null, "label"), ...answerNodes(turn.body));
    item.firstChild.append(...askedNodes(turn.question, turn.body));
    return item;
  }));
}

// The evidence sentences the answer is written from; the ones it rests on are marked, each opens its span.
function evidenceNodes(evidence) {
  if (!evidence.length) return [];
  const list = el("ol", null, "evidence");
  list.setAttribute("aria-label", "Evidence the answer is written from");
  for (const item of evidence) {
    const entry = el("li", null, item.used ? "used" : "");
    const open = el("button", `[${item.n}]`, "cite");
    open.type = "button";
    open.setAttribute("aria-label", `Open evidence from passage ${item.n} in its document`);
    open.addEventListener("click", () => openPassage(item.doc_id, item.start, item.end, `Evidence from passage [${item.n}]`));
    const text = el(item.used ? "strong" : "span", null, "evidence-text");
    text.append(...displayNodes(item.display, item.text));
    entry.append(open, " ", text);
    list.append(entry);
  }
  return [el("h3", "Evidence"), list];
}

function ranks(passage, mode) {
  const at = (rank) => (rank === null ? "–" : `#${rank}`);
  const parts = [`bm25 ${at(passage.bm25_rank)}`, `dense ${at(passage.dense_rank)}`];
  if (mode === "hybrid") parts.push(`fused #${passage.rank}`);
  return parts.join(" · ");
}

function renderSources(passages, mode) {
  $("sources-note").textContent = mode === "hybrid"
    ? "The passages given to the model; [n] in the answer is passage n."
    : `Passages ranked by a ${mode} search for the question.`;
  $("sources").replaceChildren(...passages.map((p) => {
    const item = el("li");
    const open = el("button", `${mode === "hybrid" ? `[${p.rank}]` : `#${p.rank}`} ${p.title}`, "source");
    open.type = "button";
    open.addEventListener("click", () => openPassage(p.doc_id, p.start, p.end, `Passage from ${mode} rank ${p.rank}`));
    item.append(open, " ", el("span", ranks(p, mode), "ranks"));
    return item;
  }));
}

async function ask(question, mode, k) {
  inFlight?.abort();
  const controller = new AbortController();
  inFlight = controller;
  const answer = $("answer");
  answer.replaceChildren();
  answer.classList.remove("abstained");
  answer.setAttribute("aria-busy", "true");
  $("passage").hidden = true;
  $("sources").replaceChildren();
  $("asked").replaceChildren(...askedNodes(question));
  renderThread(thread.length); // the latest answered turn moves up into the thread
  setState("streaming", "Retrieving passages…");
  try {
    if (mode !== "hybrid") {
      const search = await postJson("/search", { query: question, k, mode }, controller.signal);
      renderSources((await search.json()).results, mode);
    }
    const history = historyOf(thread);
    const response = await postJson("/ask", { question, k, stream: true, history }, controller.signal);
    let draft = null; // the answer as it is written, above the evidence it is written from
    for await (const { event, data } of serverSentEvents(response)) {
      if (event === "passages") {
        if (mode === "hybrid") renderSources(data.passages, mode);
        setState("streaming", "Choosing the evidence…");
      } else if (event === "evidence") {
        draft = draft || el("p", null, "draft"); // sent again (second look, papers named): the text so far stays
        answer.replaceChildren(draft, ...evidenceNodes(data.evidence));
        setState("streaming", "Writing the answer…");
      } else if (event === "token") {
        (draft || answer).append(data.text);
      } else if (event === "answer") {
        renderAnswer(data);
        if (mode === "hybrid") renderSources(data.passages || [], mode); // reading may add passages: [n] is passage n
        $("asked").replaceChildren(...askedNodes(question, data));
        thread.push({ question, body: data });
        saveThread();
        setState("done", data.abstained ? "No answer found." : `Answered in ${Math.round(data.timings_ms.total)} ms.`);
      } else if (event === "error") {
        setState("error", data.detail);
      }
    }
    if ($("app").dataset.state === "streaming") setState("error", "The answer stream ended before the answer.");
  } catch (error) {
    if (error.name !== "AbortError") setState("error", error.message);
  } finally {
    if (inFlight === controller) { // a newer question may have replaced this one
      inFlight = null;
      answer.setAttribute("aria-busy", "false");
    }
  }
}

function newConversation() {
  inFlight?.abort();
  thread = [];
  try { localStorage.removeItem(STORE); } catch (_) { /* storage off */ }
  renderThread();
  for (const id of ["asked", "answer", "sources"]) $(id).replaceChildren();
  $("sources-note").textContent = "";
  $("passage").hidden = true;
  setState("idle", "New conversation.");
  $("question").focus();
}

// After a reload: the thread above, the latest turn in the answer box with its sources.
function restoreThread() {
  if (!thread.length) return;
  const last = thread.at(-1);
  renderThread();
  $("asked").replaceChildren(...askedNodes(last.question, last.body));
  renderAnswer(last.body);
  renderSources(last.body.passages || [], "hybrid");
  setState("done", `Conversation restored (${thread.length} turn${thread.length === 1 ? "" : "s"}).`);
}

document.addEventListener("DOMContentLoaded", () => {
  restoreThread();
  $("new-conversation").addEventListener("click", newConversation);
  $("ask-form").addEventListener("submit", (event) => {
    event.preventDefault();
    const form = new FormData(event.target);
    ask(String(form.get("question")).trim(), String(form.get("mode")), Number(form.get("k")));
  });
});
