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


# --- render, bundle, verify, checksums ---
from builder import bundle as bundle_step  # noqa: E402
from builder import render as render_step  # noqa: E402
from builder.constants import DEFAULT_TARGET  # noqa: E402

out_console = Console()


@app.command()
def render(
    target: str = typer.Option(DEFAULT_TARGET, "--target", "-t", help="Target name (targets/<name>.toml) or a .toml path."),
    out: Path = typer.Option(..., "--out", "-o", help="Folder to write launch/ and README.md into (replaced atomically)."),
) -> None:
    """Render the launch script, launch/ENV.md and the model card of one target."""
    for path in render_step.render_to(target=target, out=out):
        out_console.print(f"wrote {path}", highlight=False, soft_wrap=True)


@app.command("bundle")
def bundle_cmd(
    target: str = typer.Option(DEFAULT_TARGET, "--target", "-t", help="Target name (targets/<name>.toml) or a .toml path."),
    out: Path = typer.Option(..., "--out", "-o", help="Bundle folder; written atomically, only ever replacing an earlier bundle."),
) -> None:
    """Assemble a checksummed release bundle: README.md, launch/, patches/, evidence/, bundle.json."""
    result = bundle_step.build_bundle(target=target, out=out)
    m = result.manifest
    out_console.print(
        f"[bold green]bundle[/] {result.path}: {len(result.files)} files, target {m.target}, "
        f"{m.engine_profile}, kv {m.kv_cache_dtype}\n  check it: python -m builder verify {result.path}",
        highlight=False,
        soft_wrap=True,
    )


@app.command()
def verify(
    directory: Path = typer.Argument(..., help="A bundle folder (holds CHECKSUMS.sha256 and bundle.json)."),
    as_json: bool = typer.Option(False, "--json", help="Print the report as JSON instead of a table."),
) -> None:
    """Check a bundle against its CHECKSUMS.sha256: modified, missing and unexpected files."""
    from rich.table import Table

    report = bundle_step.verify_bundle(directory)
    if as_json:
        typer.echo(report.model_dump_json(indent=2))
    elif report.ok:
        out_console.print(f"[bold green]ok[/] {directory}: {report.checked} files match CHECKSUMS.sha256", highlight=False, soft_wrap=True)
    else:
        table = Table(title=f"{directory}: differs from CHECKSUMS.sha256")
        table.add_column("problem", style="bold red")
        table.add_column("file")
        for kind, path in report.problems():
            table.add_row(kind, path)
        out_console.print(table)
    report.raise_for_problems()


@app.command()
def checksums() -> None:
    """Rewrite the repo's CHECKSUMS.sha256 over bundle/, evidence/, Dockerfile and docker/."""
    path = bundle_step.write_repo_checksums()
    out_console.print(f"wrote {path} ({len(bundle_step.shipped_files())} files)", highlight=False, soft_wrap=True)

@app.command("publish")
def publish_cmd(
    bundle_dir: Path = typer.Argument(..., help="Bundle directory written by `builder bundle`."),
    repo: str = typer.Option(..., "--repo", help="Hub model repo, 'org/name'."),
    revision: str = typer.Option("main", "--revision", help="Branch to commit to (created when absent)."),
    private: bool = typer.Option(False, "--private", help="Create the repo private (an existing repo keeps its visibility)."),
    tag: str | None = typer.Option(None, "--tag", help="Tag for the commit (default: the bundle version)."),
    yes: bool = typer.Option(False, "--yes", help="Upload. Without it, only the plan is printed (dry run)."),
    allow_failed_gates: bool = typer.Option(
        False, "--allow-failed-gates", help="Publish despite missing or failed gates; the model card then says so at the top."
    ),
) -> None:
    """Publish a verified bundle to the Hugging Face Hub (dry run unless --yes)."""
    # Imported here so other commands do not pay for importing huggingface_hub.
    from builder.publish import PublishRequest, publish

    request = PublishRequest.parse(
        bundle_dir=bundle_dir, repo=repo, revision=revision, private=private, tag=tag, yes=yes, allow_failed_gates=allow_failed_gates
    )
    publish(request=request)


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
