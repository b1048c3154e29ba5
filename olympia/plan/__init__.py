"""Plans: diff a spec against the catalog, review, apply as one transaction; inspect back."""

from olympia.plan.apply import ApplyResult, apply_plan
from olympia.plan.changes import Change
from olympia.plan.inspect import inspect
from olympia.plan.plan import PLAN_FORMAT, PLAN_FORMAT_VERSION, Plan, make_plan

__all__ = ["PLAN_FORMAT", "PLAN_FORMAT_VERSION", "ApplyResult", "Change", "Plan", "apply_plan",
           "inspect", "make_plan"]
