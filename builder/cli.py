"""Thin command line: parse arguments, call one function per command, map errors to exit codes."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import typer
from rich.console import Console

from builder import config
from builder.errors import BuilderError

app = typer.Typer(
    name="builder",
    help="Build, verify and publish the qfn-int8kv serving release.",
    no_args_is_help=True,
    rich_markup_mode="rich",
    pretty_exceptions_enable=False,
    add_completion=False,
)
err_console = Console(stderr=True)


@app.callback()
def _root() -> None:
    """Build, verify and publish the qfn-int8kv serving release."""


@app.command()
def schema(
    out: Path | None = typer.Option(None, "--out", "-o", help="Write the JSON Schema here instead of stdout."),
) -> None:
    """Export the JSON Schema of the target config (every field with its description)."""
    text = json.dumps(config.json_schema(), indent=2) + "\n"
    if out is None:
        typer.echo(text, nl=False)
    else:
        out.write_text(text)


def main() -> None:
    try:
        app()
    except BuilderError as exc:
        err_console.print(f"[bold red]error:[/] {exc.message}", highlight=False)
        if exc.hint:
            err_console.print(f"  [bold]fix:[/] {exc.hint}", highlight=False)
        sys.exit(exc.exit_code)


if __name__ == "__main__":
    main()
