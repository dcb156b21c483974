"""KV capacity planner: bytes per token, block layout and KV pool per KV dtype, as vLLM 0.33.0 lays them out."""

from builder.plan.capacity import plan_capacity, plan_dtype, plan_target, serving_setup
from builder.plan.compare import HostsComparison, compare_hosts, plan_against_single_host
from builder.plan.models import CapacityPlan, DtypePlan, ServingSetup
from builder.plan.report import hosts_table, plan_json, plan_renderable

__all__ = [
    "CapacityPlan",
    "DtypePlan",
    "HostsComparison",
    "ServingSetup",
    "compare_hosts",
    "hosts_table",
    "plan_against_single_host",
    "plan_capacity",
    "plan_dtype",
    "plan_json",
    "plan_renderable",
    "plan_target",
    "serving_setup",
]
