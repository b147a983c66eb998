"""Storage quota rules of the (fictional) Xinghe Knowledge Base plans, used by the billing service.

Yinshan Technology and Xinghe Knowledge Base are invented for the ctxrag demo.
"""
from __future__ import annotations

# Storage included in each plan, in gigabytes.
PLAN_STORAGE_GB = {
    "basic": 20,
    "team": 200,
    "enterprise": 2048,
}

# Extra storage is sold in packs of 100 GB at 30 yuan per pack per month.
EXTRA_PACK_GB = 100
EXTRA_PACK_PRICE_YUAN = 30


def storage_quota_gb(plan: str, extra_packs: int = 0) -> int:
    """Total storage in GB for a plan plus purchased extra packs (the Basic plan cannot buy packs)."""
    plan = plan.lower()
    if plan not in PLAN_STORAGE_GB:
        raise ValueError(f"unknown plan {plan!r}; expected one of {sorted(PLAN_STORAGE_GB)}")
    if extra_packs and plan == "basic":
        raise ValueError("the basic plan cannot buy extra storage packs")
    return PLAN_STORAGE_GB[plan] + extra_packs * EXTRA_PACK_GB


def monthly_storage_cost_yuan(extra_packs: int) -> int:
    """Monthly price of the extra storage packs alone."""
    if extra_packs < 0:
        raise ValueError(f"extra_packs={extra_packs} must be >= 0")
    return extra_packs * EXTRA_PACK_PRICE_YUAN


class QuotaChecker:
    """Warns when a knowledge base uses more than 90% of its quota."""

    WARN_RATIO = 0.9

    def __init__(self, plan: str, extra_packs: int = 0) -> None:
        self.limit_gb = storage_quota_gb(plan, extra_packs)

    def status(self, used_gb: float) -> str:
        if used_gb > self.limit_gb:
            return "over_quota"
        if used_gb >= self.WARN_RATIO * self.limit_gb:
            return "warning"
        return "ok"
