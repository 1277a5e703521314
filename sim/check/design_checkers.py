"""A team's own invariants, judged on a gate's or a leased worker's run as on the semaphore's.

A :class:`semsim.check.checker.Checker` hears the semaphore's holder,
clients and API. The other two designs have no holder, no permits and no
durable operations, but they share the ground truth every design is judged
by: the external API. So a checker that hears only what they share runs on
any design's world, and a team's promise about the API ("never more than 4
calls for an account at once", "no item's work runs twice") is judged
alike on all three, in ``semsim run``, ``semsim fuzz --design`` and the
pytest plugin:

- ``on_api``: every call that starts or ends at the API, as in the
  semaphore's world, with ``limit`` the world's cap and ``in_use`` the
  capacity the design counts as taken for the account (the gate's ledger
  slots that count against its cap; the account's instances under a live
  lease), ``leases`` None and every ``running`` call's ``holds_permit``
  False (there are no permits);
- ``on_finish``: once, when every item's work has ended (``items_end``
  held), with no ``holders``, ``in_use`` the design's count per account and
  ``waiting`` 0.

A checker that hears anything else (a round, a commit, an operation, a
holder's eviction) would never be called on such a run: it is refused
before the run (:func:`check_design_checkers`), not silently unjudged.
Verdicts are the semaphore's: :class:`~semsim.check.checker.Violated` or
an ``assert`` stops the run under the checker's name, any other exception
is the ``checker`` verdict naming it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Final

from semsim.check.checker import CHECKER_FAILED, HOOKS, Checker, Violated, assertion_detail, hears
from semsim.check.design_promises import Verdicts, judges_for
from semsim.check.events import ApiCallChange, Finish, RunningCall
from semsim.runtime.kernel import Sim
from semsim.world.external_api import ApiCall, Change, ExternalApi

#: The judge every gate and leased-worker run has (semsim.harness.designs.ITEMS_END, which is a
#: layer above this module).
ITEMS_END: Final = "items_end"
#: The hooks a gate's or a leased worker's run calls.
DESIGN_HOOKS: Final = ("on_api", "on_finish")


def check_design_checkers(checkers: Sequence[type[Checker]], design: str) -> None:
    """``ValueError`` naming a checker that hears a hook ``design`` never calls, or takes the name of
    one of the design's own judges."""
    for checker in checkers:
        if checker.name in (ITEMS_END, *judges_for(design)):
            raise ValueError(
                f"invariant {checker.name} takes the name of one of the {design} design's own judges; "
                "give yours a name of its own"
            )
        heard = [hook for hook in HOOKS if getattr(checker, hook) is not getattr(Checker, hook)]
        deaf = [hook for hook in heard if hook not in DESIGN_HOOKS]
        if deaf:
            raise ValueError(
                f"invariant {checker.name} hears {', '.join(deaf)}, which a run of the {design} design "
                f"never calls (it calls {' and '.join(DESIGN_HOOKS)}: semsim.check.design_checkers)"
            )


class DesignCheckers:
    """The user's checkers of one gate or leased-worker run, told what :data:`DESIGN_HOOKS` carry."""

    def __init__(
        self,
        sim: Sim,
        verdicts: Verdicts,
        api: ExternalApi,
        cap: int,
        held: Callable[[int], Mapping[str, int]],
        checkers: Sequence[type[Checker]],
    ) -> None:
        self._sim = sim
        self._verdicts = verdicts
        self._api = api
        self._cap = cap
        self._held = held
        self._checkers = [checker() for checker in checkers]
        if any(hears(checker, "on_api") for checker in self._checkers):
            api.watch(self._changed)

    def _changed(self, change: Change, call: ApiCall) -> None:
        api = self._api
        account = call.account
        heard = ApiCallChange(
            self._sim.now(),
            change,
            account,
            call.key,
            api.effects.get(call.key, 0),
            api.idempotent,
            in_flight=api.in_flight.get(account, 0),
            in_use=self._held(self._sim.now()).get(account, 0),
            limit=self._cap,
            running=tuple(
                RunningCall(other.key, other.started_at, other.attempt, holds_permit=False)
                for other in api.running.values()
                if other.account == account
            ),
        )
        self._tell("on_api", heard)

    def finish(self, accounts: Sequence[str]) -> None:
        """Every item's work has ended: the checkers' ``on_finish``."""
        held = self._held(self._sim.now())
        self._tell("on_finish", Finish(self._sim.now(), {}, {a: held.get(a, 0) for a in accounts}, 0))

    def _tell(self, hook: str, event: object) -> None:
        for checker in self._checkers:
            if not hears(checker, hook):
                continue
            try:
                getattr(checker, hook)(event)
            except Violated as violated:
                self._verdicts.broken(checker.name, violated.detail)
            except AssertionError as error:
                self._verdicts.broken(checker.name, assertion_detail(error))
            except Exception as error:  # the checker's own bug: named, never the design's fault
                self._verdicts.broken(
                    CHECKER_FAILED,
                    f"invariant {checker.name} ({type(checker).__qualname__}.{hook}) failed: "
                    f"{type(error).__name__}: {error}",
                )
