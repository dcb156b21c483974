"""Launch: the launch plan rendered as the script, its ENV.md and the compose file (templates are
package data in templates/, with the middleware the script ships beside it)."""

from builder.launch.environment import env_escape, make_environment, md_code, one_line, render_template, shell_quote
from builder.launch.render import render_launch

__all__ = ["env_escape", "make_environment", "md_code", "one_line", "render_launch", "render_template", "shell_quote"]
