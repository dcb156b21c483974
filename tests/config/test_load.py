"""Target files that are not UTF-8, or nest too deeply to parse, are ConfigErrors (exit 2), not tracebacks."""

from __future__ import annotations

import pytest

from builder.config import load_target
from builder.constants import TARGETS_DIR
from builder.errors import ConfigError


def test_a_target_file_that_is_not_utf8_is_a_config_error(tmp_path, run_cli):
    path = tmp_path / "latin1.toml"
    text = (TARGETS_DIR / "h200.toml").read_text().replace('description = "', 'description = "Gr\u00fc\u00dfe, ')
    path.write_bytes(text.encode("latin-1"))
    with pytest.raises(ConfigError, match=r"not UTF-8 text \(byte 0xfc on line \d+\)") as err:
        load_target(path)
    assert "UTF-8" in err.value.hint
    code, _, out = run_cli("render", "--target", str(path), "--out", str(tmp_path / "r"))
    assert code == ConfigError.exit_code == 2 and "not UTF-8 text" in out and not (tmp_path / "r").exists()


@pytest.mark.parametrize("doc", ["x = " + "[" * 20000 + "]" * 20000, "x = " + "{a = " * 5000 + "1" + "}" * 5000])
def test_a_target_file_nested_20000_deep_is_a_config_error(tmp_path, run_cli, doc):
    path = tmp_path / "deep.toml"
    path.write_text(doc)
    with pytest.raises(ConfigError, match="nest too deeply"):
        load_target(path)
    code, _, out = run_cli("bundle", "--target", str(path), "--out", str(tmp_path / "b"))
    assert code == 2 and "nest too deeply" in out and not (tmp_path / "b").exists()
