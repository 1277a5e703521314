"""Configuration is validated with the reference's rules; errors name the field."""

from __future__ import annotations

from typing import Any

import pytest

from semaphore_core import (
    HolderConfig,
    LeaseOptions,
    Over,
    Ratio,
    SemaphoreConfigError,
    Strict,
    Under,
    budgets,
)


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"limit": -1}, "limit"),
        ({"limit": 1.5}, "limit"),
        ({"limit": True}, "limit"),
        ({"limit": "10"}, "limit"),
        ({"limit": 2**53}, "limit"),
        ({"limit": 1, "round_wait_ms": 0}, "round_wait_ms"),
        ({"limit": 1, "round_period_ms": -5}, "round_period_ms"),
        ({"limit": 1, "grant_timeout_ms": 2**31}, "grant_timeout_ms"),
        ({"limit": 1, "round_wait_ms": 10.5}, "round_wait_ms"),
        ({"limit": 1, "group_limit": 5}, "group_limit"),
        ({"limit": 1, "can_grant": True}, "can_grant"),
        ({"limit": 1, "leases": {"provisioning": "strict"}}, "leases"),
        ({"limit": 1, "fixes": {"no-such-fix"}}, "fixes"),
        ({"limit": 1, "fixes": 5}, "fixes"),
        ({"limit": 1, "fixes": None}, "fixes"),
        ({"limit": 1, "fixes": [1, "group-ceiling-counts-leases"]}, "fixes"),
        ({"limit": 1, "fixes": [["group-ceiling-counts-leases"]]}, "fixes"),
        ({"limit": 1, "fixes": "group-ceiling-counts-leases"}, "fixes"),
    ],
)
def test_invalid_holder_config_names_the_field(kwargs: dict[str, Any], field: str) -> None:
    with pytest.raises(SemaphoreConfigError, match=rf"^{field}\b"):
        HolderConfig(**kwargs)


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"permits_per_lease": 0}, "leases.permits_per_lease"),
        ({"ttl_ms": 2**31}, "leases.ttl_ms"),
        ({"ttl_ms": -1}, "leases.ttl_ms"),
        ({"max_groups": 0}, "leases.max_groups"),
        ({"max_clients_per_group": 1.5}, "leases.max_clients_per_group"),
        ({"limited_groups": "withinGroupLimit"}, "leases.limited_groups"),
        ({"provisioning": "strict"}, "leases.provisioning"),
    ],
)
def test_invalid_lease_options_name_the_field(kwargs: dict[str, Any], field: str) -> None:
    with pytest.raises(SemaphoreConfigError, match=rf"^{field}\b"):
        LeaseOptions(**kwargs)


@pytest.mark.parametrize(
    ("build", "field"),
    [
        (lambda: Under(reserve=-1), "leases.provisioning.reserve"),
        (lambda: Over(extra=2.5), "leases.provisioning.extra"),
        (lambda: Ratio(-0.1), "Ratio"),
        (lambda: Ratio(float("inf")), "Ratio"),
    ],
)
def test_invalid_provisioning_amounts_name_the_field(build: Any, field: str) -> None:
    with pytest.raises(SemaphoreConfigError, match=rf"^{field}\b"):
        build()


def test_defaults_are_the_references() -> None:
    config = HolderConfig(limit=3)
    assert (config.round_wait_ms, config.round_period_ms, config.grant_timeout_ms) == (1_000, 2_000, 10_000)
    options = LeaseOptions()
    assert options.provisioning == Strict()
    assert (options.permits_per_lease, options.ttl_ms, options.max_groups, options.max_clients_per_group) == (
        64,
        1_800_000,
        100,
        100,
    )
    assert options.limited_groups == "exclude"


def test_integral_floats_are_accepted_as_javascript_would() -> None:
    config = HolderConfig(limit=3.0, round_wait_ms=500.0)
    assert config.limit == 3
    assert type(config.round_wait_ms) is int


def test_a_callable_limit_is_accepted_and_only_checked_per_round() -> None:
    assert callable(HolderConfig(limit=lambda: -1).limit)


@pytest.mark.parametrize(
    ("provisioning", "limit", "expected"),
    [
        (Strict(), 10, (10, 10, True)),
        (Under(reserve=3), 10, (7, 3, False)),
        (Under(reserve=30), 10, (1, 9, False)),
        (Under(reserve=3), 0, (0, 0, False)),
        (Under(reserve=Ratio(0.25)), 10, (8, 2, False)),
        (Over(extra=5), 10, (10, 5, False)),
        (Over(extra=Ratio(0.5)), 7, (7, 3, False)),
    ],
)
def test_budgets_per_mode(provisioning: Any, limit: int, expected: tuple[int, int, bool]) -> None:
    b = budgets(provisioning, limit)
    assert (b.grants, b.leases, b.shared) == expected
