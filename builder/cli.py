"""Thin command line: parse arguments, call one function per command, map errors to exit codes."""

from __future__ import annotations

import sys
from pathlib import Path

import typer
from rich.console import Console

from builder.constants import PATCHES_DIR
from builder.errors import BuilderError

app = typer.Typer(
    name="builder",
    help="Build, verify and publish the qfn-int8kv serving release.",
    no_args_is_help=True,
    rich_markup_mode="rich",
    pretty_exceptions_enable=False,
)
err_console = Console(stderr=True)


# --- patches: engine wheel, patch series, kernel AOT fit check ---------------------------
patches_app = typer.Typer(help="Fetch the pinned engine and check / apply / refresh the patch series.", no_args_is_help=True)
app.add_typer(patches_app, name="patches")
out_console = Console()


def _print_series(report) -> None:
    from rich.table import Table

    table = Table(title=f"patch series against {report.target}")
    for column in ("patch", "file", "status", "upstream sha256", "detail"):
        table.add_column(column, overflow="fold")
    colours = {"applies cleanly": "green", "already applied": "cyan", "fails": "red"}
    for r in report.results:
        status = f"[{colours[r.status.value]}]{r.status.value}[/]"
        table.add_row(r.patch, r.path, status, "matches" if r.upstream_matches else "differs", r.detail)
    out_console.print(table)


@patches_app.command("fetch-engine")
def patches_fetch_engine() -> None:
    """Download vllm==0.33.0 (x86_64 wheel), verify its sha256, unpack its Python sources into the cache."""
    from builder.patches.engine import fetch_engine

    tree = fetch_engine(log=out_console.print)
    out_console.print(f"engine sources: {tree.src_dir} (wheel sha256 {tree.wheel_sha256} verified)")


@patches_app.command("check")
def patches_check(
    target: Path | None = typer.Option(None, "--target", help="engine tree or site-packages; default: the cached 0.33.0 sources"),
) -> None:
    """Dry-run the series in order; exit non-zero if any file fails."""
    from builder.patches.apply import check_engine

    check_engine(target=target, show=_print_series)


@patches_app.command("apply")
def patches_apply(to: Path = typer.Option(..., "--to", help="site-packages or unpacked engine holding vllm/")) -> None:
    """Check the series, apply it to DIR, byte-compile every patched file."""
    from builder.patches.apply import apply_series

    report = apply_series(target=to, patches_dir=PATCHES_DIR, show=_print_series)
    out_console.print(f"applied {len(report.applied)} file sections, byte-compiled {len(report.compiled)} files")


@patches_app.command("refresh")
def patches_refresh(
    edited: Path = typer.Option(..., "--from", help="the edited engine tree"),
    add: list[str] = typer.Option([], "--add", help="PATCH:PATH, a file to add to a patch"),
) -> None:
    """Regenerate every diff of the series from an edited tree."""
    from builder.patches.refresh import refresh_series

    report = refresh_series(edited=edited, add=add)
    for path in report.written:
        out_console.print(f"rewrote {path}")
    for path in report.unchanged:
        out_console.print(f"unchanged {path}")


@patches_app.command("aot")
def patches_aot(
    engine: Path = typer.Option(..., "--engine", help="a PATCHED engine tree or site-packages"),
    arch: str = typer.Option(..., "--arch", help="sm_80, sm_90, sm_120 or sm_121"),
    json_out: Path | None = typer.Option(None, "--json", help="write the per-config report here"),
) -> None:
    """Compile the patched QSA kernel's production configs for ARCH; fail if one exceeds its shared memory."""
    from builder.patches.aot import compile_qsa_kernels

    from rich.table import Table

    report = compile_qsa_kernels(engine_root=engine, arch=arch, json_out=json_out)
    table = Table(title=f"QSA split-K kernel on {arch} (Triton {report.triton_version}, max shared {report.max_shared_bytes} B)")
    for column in ("cache", "GQA", "BLOCK_N", "warps", "splits", "shared B", "regs", "local B"):
        table.add_column(column, justify="right")
    for c in report.configs:
        table.add_row(c.cache_dtype, f"{c.num_query_heads}/{c.num_kv_heads}", str(c.block_n), str(c.num_warps), str(c.num_splits), str(c.shared_bytes), str(c.registers), str(c.local_bytes))
    out_console.print(table)


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
