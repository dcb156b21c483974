"""The jinja2 environment: strict, loading only the template folders, with quoting filters."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import jinja2

from builder.constants import CARD_TEMPLATE, LAUNCH_TEMPLATES_DIR
from builder.errors import RenderError

TEMPLATE_SUFFIX = ".j2"


class TemplateFolders(jinja2.BaseLoader):
    """Serves `*.j2` files lying directly in the given folders, by file name, and nothing else.

    bundle/ also holds patches/ and the benchmark; only templates may be reachable from a template.
    """

    def __init__(self, folders: list[Path]) -> None:
        self.folders = folders

    def _path(self, name: str) -> Path | None:
        if "/" in name or not name.endswith(TEMPLATE_SUFFIX):
            return None
        for folder in self.folders:
            p = folder / name
            if p.is_file():
                return p
        return None

    def get_source(self, environment: jinja2.Environment, template: str):
        path = self._path(template)
        if path is None:
            raise jinja2.TemplateNotFound(template)
        mtime = path.stat().st_mtime
        return path.read_text(), str(path), lambda: path.stat().st_mtime == mtime

    def list_templates(self) -> list[str]:
        return sorted({p.name for f in self.folders for p in f.glob(f"*{TEMPLATE_SUFFIX}")})


def shell_quote(value: object) -> str:
    """One shell word, whatever the value holds."""
    return shlex.quote(str(value))


_MD_CELL_BREAK = re.compile(r"\s*\n\s*")
_WHITESPACE = re.compile(r"\s+")


def one_line(value: object) -> str:
    """Free text on one line, e.g. inside a shell comment, where a newline would start code."""
    return _WHITESPACE.sub(" ", str(value)).strip()


def env_escape(value: object) -> str:
    """Text safe inside one ENV.md/README line or markdown table cell: no line breaks, pipes escaped."""
    text = _MD_CELL_BREAK.sub(" ", str(value).strip())
    return text.replace("\\", "\\\\").replace("|", "\\|")


def md_code(value: object) -> str:
    """A markdown code span (for a table cell) that survives backticks and pipes in the value."""
    text = str(value).replace("\n", " ")
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    fence = "`" * (longest + 1)
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    escaped = text.replace("|", "\\|")
    return f"{fence}{pad}{escaped}{pad}{fence}"


def make_environment(
    *, launch_dir: Path = LAUNCH_TEMPLATES_DIR, card_template: Path = CARD_TEMPLATE
) -> jinja2.Environment:
    env = jinja2.Environment(
        loader=TemplateFolders([launch_dir, card_template.parent]),
        undefined=jinja2.StrictUndefined,
        autoescape=False,
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters.update(shell_quote=shell_quote, env_escape=env_escape, md_code=md_code, one_line=one_line)
    return env


def render_template(env: jinja2.Environment, name: str, context: dict) -> str:
    """Render one template; a missing variable or template error becomes a RenderError naming it."""
    try:
        return env.get_template(name).render(**context)
    except jinja2.TemplateNotFound as exc:
        raise RenderError(f"template {name} not found", hint="restore it from git (builder/launch/templates/ or builder/bundle/templates/)") from exc
    except jinja2.UndefinedError as exc:
        raise RenderError(f"template {name}: {exc.message}", hint="pass the variable or fix the template") from exc
    except jinja2.TemplateSyntaxError as exc:
        raise RenderError(f"template {exc.filename}:{exc.lineno}: {exc.message}", hint="fix the template syntax") from exc
