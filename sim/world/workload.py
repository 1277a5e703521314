"""Workloads: who submits how many items, when, to which key and group, and for how long they run.

Every draw comes from the run's ``workload`` stream, per client in a fixed
order, so a seed fixes the whole arrival schedule.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from random import Random
from typing import Any, Final, Literal

import attrs
import trio

from semsim.inputs.validation import (
    MAX_TIME_MS,
    boolean,
    check_int,
    check_list,
    check_name,
    check_number,
    integer,
    js_int,
    named,
    one_of,
    optional,
    time_ms,
)
from semsim.runtime.kernel import Sim
from semsim.runtime.network import Network, RpcError

MAX_CLIENTS: Final = 1_000


#: The most items one scripted arrival or one burst may submit.
MAX_BATCH: Final = 10_000
#: The highest steady rate, per client: one item per millisecond.
MAX_ITEMS_PER_MINUTE: Final = 60_000.0
MAX_KEYS: Final = 16
MAX_GROUPS: Final = 64


@attrs.frozen
class Arrival:
    """A scripted submission: ``count`` items from client number ``client`` at ``at_ms``."""

    at_ms: int = attrs.field(converter=js_int, validator=time_ms())
    client: int = attrs.field(converter=js_int, validator=integer(0, MAX_CLIENTS - 1))
    count: int = attrs.field(default=1, converter=js_int, validator=integer(1, MAX_BATCH))
    group: str | None = attrs.field(default=None, validator=optional(named))
    key: str | None = attrs.field(default=None, validator=optional(named))
    duration_ms: int = attrs.field(default=10_000, converter=js_int, validator=time_ms())


def _names(most: int) -> Callable[[Any, attrs.Attribute[Any], Any], None]:
    def check(_: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
        check_list(attribute.name, value, most)
        if not value:
            raise ValueError(f"{attribute.name} must not be empty")
        for index, name in enumerate(value):
            check_name(f"{attribute.name}[{index}]", name)
        if len(set(value)) != len(value):
            raise ValueError(f"{attribute.name} must not repeat a name, got {list(value)!r}")

    return check


def _pair(value: Any) -> Any:
    """A ``[low, high]`` range with whole-number floats as ints (as every other integer field)."""
    return tuple(js_int(bound) for bound in value) if isinstance(value, list | tuple) else value


def _range_ms(_: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
    if not isinstance(value, tuple | list) or len(value) != 2:
        raise ValueError(f"{attribute.name} must be a pair [low, high], got {value!r}")
    for index, bound in enumerate(value):
        check_int(f"{attribute.name}[{index}]", bound, 0, MAX_TIME_MS)
    if value[0] > value[1]:
        raise ValueError(f"{attribute.name} must be a range with low <= high, got {list(value)!r}")


@attrs.frozen
class Workload:
    """Arrivals per client: ``steady`` (exponential gaps) or ``bursts`` (batches every so often)."""

    clients: int = attrs.field(default=4, converter=js_int, validator=integer(1, MAX_CLIENTS))
    #: How many of the clients are plain (send no ``leases``, so are never leased).
    plain_clients: int = attrs.field(default=0, converter=js_int, validator=integer(0, MAX_CLIENTS))
    keys: tuple[str, ...] = attrs.field(default=("acct",), validator=_names(MAX_KEYS))
    groups: tuple[str, ...] = attrs.field(default=("wf-1", "wf-2"), validator=_names(MAX_GROUPS))
    arrival: Literal["steady", "bursts"] = attrs.field(default="steady", validator=one_of("steady", "bursts"))
    #: Steady: mean items per minute per client. Bursts: items per burst.
    items_per_minute: float = attrs.field(
        default=20.0, validator=lambda _, a, v: check_number(a.name, v, 0.0, MAX_ITEMS_PER_MINUTE)
    )
    burst_size: int = attrs.field(default=20, converter=js_int, validator=integer(1, MAX_BATCH))
    burst_every_ms: int = attrs.field(default=60_000, converter=js_int, validator=time_ms(1))
    #: Bursts only: every client bursts at the same moments (multiples of ``burst_every_ms``)
    #: instead of from a random phase, so equally old demand from different clients meets
    #: in one round and the holder's tie-break by ``clientId`` decides who is served.
    aligned: bool = attrs.field(default=False, validator=boolean)
    #: How clients are named: ``numbered`` (``client-0``, ``client-1``, ...) or ``case_twins``
    #: (``client-0``, ``Client-0``, ``client-1``, ...): ids that differ only in case, which
    #: ``localeCompare`` orders lower case first and code-point order the other way round.
    client_ids: Literal["numbered", "case_twins"] = attrs.field(
        default="numbered", validator=one_of("numbered", "case_twins")
    )
    #: Each item runs for a duration drawn uniformly in this range.
    duration_ms: tuple[int, int] = attrs.field(default=(2_000, 20_000), converter=_pair, validator=_range_ms)
    #: Arrivals stop at this time (the run may go on to let work finish).
    until_ms: int = attrs.field(default=600_000, converter=js_int, validator=time_ms())
    #: True: a client's next arrival is drawn once its previous submission was taken, so a
    #: lost or slow submission delays the arrivals after it (the first worlds' behaviour, kept so
    #: their traces keep their bytes). False: arrivals keep their drawn times whatever the
    #: intake does, so every design meets the same items at the same times (``semsim compare``).
    paced_by_intake: bool = attrs.field(default=True, validator=boolean)
    #: When given, exactly these arrivals replace the random processes.
    script: tuple[Arrival, ...] = attrs.field(default=(), validator=lambda _, a, v: check_list(a.name, v))

    def __attrs_post_init__(self) -> None:
        if self.aligned and self.arrival != "bursts":
            raise ValueError(f"aligned needs arrival 'bursts', got arrival {self.arrival!r}")
        if self.plain_clients > self.clients:
            raise ValueError(
                f"plain_clients must be at most clients ({self.clients}), got {self.plain_clients}"
            )
        for index, arrival in enumerate(self.script):
            if not isinstance(arrival, Arrival):
                raise ValueError(f"script[{index}] must be an arrival, got {arrival!r}")
            if arrival.group is not None and arrival.group not in self.groups:
                raise ValueError(
                    f"script[{index}].group {arrival.group!r} is not one of groups {list(self.groups)!r}"
                )
            if arrival.key is not None and arrival.key not in self.keys:
                raise ValueError(
                    f"script[{index}].key {arrival.key!r} is not one of keys {list(self.keys)!r}"
                )

    def client_names(self) -> list[str]:
        if self.client_ids == "case_twins":
            width = len(str((self.clients - 1) // 2))
            return [f"{'cC'[i % 2]}lient-{i // 2:0{width}d}" for i in range(self.clients)]
        width = len(str(self.clients - 1))
        return [f"client-{i:0{width}d}" for i in range(self.clients)]

    def is_plain(self, index: int) -> bool:
        return index >= self.clients - self.plain_clients


#: Told of each batch as the workload first sends it (a meter's queue wait starts there).
OnSubmit = Callable[[list[dict[str, Any]]], None]


async def arrivals(
    sim: Sim,
    network: Network,
    workload: Workload,
    client: str,
    index: int,
    on_submit: OnSubmit | None = None,
) -> None:
    """Submit one client's items until ``until_ms``; a failed submission is retried."""
    if workload.script:
        await _scripted(sim, network, workload, client, index, on_submit)
        return
    rng = sim.rng(f"workload:{client}")
    if not workload.paced_by_intake:
        await _detached(sim, network, workload, client, rng, on_submit)
        return
    n = 0
    while True:
        gap, batch = _next_gap(workload, rng, n, sim.now())
        if sim.now() + gap >= workload.until_ms:
            return
        await sim.sleep(gap)
        items, n = _batch(workload, client, rng, n, batch)
        await _submit(sim, network, client, items, on_submit)


async def _detached(
    sim: Sim, network: Network, workload: Workload, client: str, rng: Random, on_submit: OnSubmit | None
) -> None:
    """Arrivals at their drawn times, whatever the intake does: each batch is submitted (and, if
    lost, submitted again) in a task of its own, so a slow or lossy intake delays no later
    arrival, and every design meets the same items at the same times."""
    n = 0
    at_ms = sim.now()
    async with trio.open_nursery() as submissions:
        while True:
            gap, batch = _next_gap(workload, rng, n, at_ms)
            if at_ms + gap >= workload.until_ms:
                return
            at_ms += gap
            await sim.sleep_until(at_ms)
            items, n = _batch(workload, client, rng, n, batch)
            submissions.start_soon(_submit, sim, network, client, items, on_submit, name=f"submit.{client}")


def _next_gap(workload: Workload, rng: Random, n: int, now_ms: int) -> tuple[int, int]:
    """How long until the next arrival, from ``now_ms``, and how many items it brings (``n``
    submitted so far)."""
    if workload.arrival == "steady":
        return max(1, round(rng.expovariate(workload.items_per_minute / 60_000))), 1
    if workload.aligned:
        return workload.burst_every_ms - now_ms % workload.burst_every_ms, workload.burst_size
    gap = workload.burst_every_ms if n else rng.randint(0, workload.burst_every_ms)
    return gap, workload.burst_size


def _batch(
    workload: Workload, client: str, rng: Random, n: int, size: int
) -> tuple[list[dict[str, Any]], int]:
    """``size`` new items of ``client``, numbered on from ``n``; and the last number used."""
    items: list[dict[str, Any]] = []
    for _ in range(size):
        n += 1
        items.append(
            {
                "id": f"{client}/item-{n}",
                "key": workload.keys[rng.randrange(len(workload.keys))],
                "group": workload.groups[rng.randrange(len(workload.groups))],
                "body": json.dumps({"duration_ms": rng.randint(*workload.duration_ms)}),
            }
        )
    return items, n


async def _scripted(
    sim: Sim, network: Network, workload: Workload, client: str, index: int, on_submit: OnSubmit | None
) -> None:
    mine = [arrival for arrival in sorted(workload.script, key=lambda a: a.at_ms) if arrival.client == index]
    if not workload.paced_by_intake:
        # Each batch in a task of its own, at its time, whatever the intake does (see _detached).
        async with trio.open_nursery() as submissions:
            n = 0
            for arrival in mine:
                await sim.sleep_until(arrival.at_ms)
                items, n = _scripted_batch(workload, arrival, client, n)
                submissions.start_soon(
                    _submit, sim, network, client, items, on_submit, name=f"submit.{client}"
                )
        return
    n = 0
    for arrival in mine:
        await sim.sleep_until(arrival.at_ms)
        items, n = _scripted_batch(workload, arrival, client, n)
        await _submit(sim, network, client, items, on_submit)


def _scripted_batch(
    workload: Workload, arrival: Arrival, client: str, n: int
) -> tuple[list[dict[str, Any]], int]:
    """A scripted arrival's items, numbered on from ``n``; and the last number used."""
    items = []
    for _ in range(arrival.count):
        n += 1
        items.append(
            {
                "id": f"{client}/item-{n}",
                "key": arrival.key or workload.keys[0],
                "group": arrival.group or workload.groups[0],
                "body": json.dumps({"duration_ms": arrival.duration_ms}),
            }
        )
    return items, n


async def _submit(
    sim: Sim, network: Network, client: str, items: list[dict[str, Any]], on_submit: OnSubmit | None = None
) -> None:
    if on_submit is not None:
        on_submit(items)
    # Enqueueing is idempotent by item id, so retrying a lost submission is safe.
    while True:
        try:
            await network.call("workload", client, "submit", items)
            return
        except RpcError:
            await sim.sleep(1_000)
