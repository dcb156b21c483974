"""Typed release config: models, engine profiles, target loading and the launch plan."""

from builder.config.engines import ENGINE_PROFILES, EngineProfile
from builder.config.launch import LaunchPlan, launch_plan
from builder.config.load import (
    available_targets,
    config_digest,
    json_schema,
    load_target,
    parse_config,
    require_pinned_base,
    target_path,
)
from builder.config.models import ReleaseConfig

__all__ = [
    "ENGINE_PROFILES",
    "EngineProfile",
    "LaunchPlan",
    "ReleaseConfig",
    "available_targets",
    "config_digest",
    "json_schema",
    "launch_plan",
    "load_target",
    "parse_config",
    "require_pinned_base",
    "target_path",
]
