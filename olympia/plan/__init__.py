"""Plans: diff a spec against the catalog, review, apply as one transaction; inspect back."""

from olympia.plan.diff import Change
from olympia.plan.plan import ApplyResult, Plan, apply_plan, make_plan

__all__ = ["ApplyResult", "Change", "Plan", "apply_plan", "make_plan"]
