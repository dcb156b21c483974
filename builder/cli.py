"""Thin command line: parse arguments, call one function per command, map errors to exit codes."""

from __future__ import annotations

import sys

import typer
from rich.console import Console

from builder.errors import BuilderError

app = typer.Typer(
    name="builder",
    help="Build, verify and publish the qfn-int8kv serving release.",
    no_args_is_help=True,
    rich_markup_mode="rich",
    pretty_exceptions_enable=False,
)
err_console = Console(stderr=True)


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
