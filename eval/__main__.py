"""``python -m citerag.eval [OPTIONS]``: the evaluation runner alone, with ``citerag eval``'s options
(:mod:`citerag.eval.cli`)."""

import typer

from citerag.eval.cli import eval_command
from citerag.service.cli import one_line_errors

app = typer.Typer(add_completion=False, pretty_exceptions_enable=False)
app.command()(one_line_errors(eval_command))

if __name__ == "__main__":
    app()
