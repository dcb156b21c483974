"""launch/ENV.md is generated from the same plan the script runs, and the environment is strict."""

from __future__ import annotations

import jinja2
import pytest

from builder.launch import env_escape, make_environment, md_code, one_line, shell_quote
from builder.launch.environment import render_template
from builder.errors import RenderError


def test_env_doc_lists_every_variable_and_kv_flag_with_its_reason(rendered):
    _, _, plan, _, doc = rendered
    for e in plan.env:
        assert f"| `{e.name}` | {md_code(e.value)} | {env_escape(e.why)} |" in doc
    kv = [f for f in plan.flags if f.kv_related]
    assert {f.flag for f in kv} >= {"--kv-cache-dtype", "--speculative-config"}
    for f in kv:
        assert f"| `{f.flag}` | {md_code(f.value)} | {env_escape(f.why)} |" in doc
    for r in plan.required:
        assert f"`{r.env}`" in doc
    assert "`DRY_RUN`" in doc
    for w in plan.warnings:
        assert f"- {env_escape(w)}" in doc


def test_filters():
    assert env_escape("a | b\n  c") == "a \\| b c"
    assert md_code("x|y") == "`x\\|y`"
    assert md_code("a`b") == "``a`b``"
    assert md_code("`a") == "`` `a ``"
    assert shell_quote("it's") == "'it'\"'\"'s'"
    assert one_line(" a\n\tb  c ") == "a b c"


def test_strict_undefined_and_template_only_loader(tmp_path):
    launch = tmp_path / "launch"
    launch.mkdir()
    (launch / "t.sh.j2").write_text("{{ nope }}")
    (tmp_path / "README.md.j2").write_text("card")
    (tmp_path / "notes.txt").write_text("not a template")
    env = make_environment(launch_dir=launch, card_template=tmp_path / "README.md.j2")
    with pytest.raises(RenderError, match="nope"):
        render_template(env, "t.sh.j2", {})
    assert render_template(env, "README.md.j2", {}) == "card"
    for name in ("notes.txt", "launch/t.sh.j2", "../README.md.j2"):
        with pytest.raises(jinja2.TemplateNotFound):
            env.get_template(name)
    assert env.list_templates() == ["README.md.j2", "t.sh.j2"]
