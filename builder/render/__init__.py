"""Render: the launch script, its ENV.md and the model card, from the typed config and evidence."""

from builder.render.card import BenchRow, CardContext, GateRow, card_context, plan_for_card, render_card
from builder.render.environment import env_escape, make_environment, md_code, one_line, shell_quote
from builder.render.launch import render_launch
from builder.render.write import render_to

__all__ = [
    "BenchRow",
    "CardContext",
    "GateRow",
    "card_context",
    "env_escape",
    "make_environment",
    "md_code",
    "one_line",
    "plan_for_card",
    "render_card",
    "render_launch",
    "render_to",
    "shell_quote",
]
