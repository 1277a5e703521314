"""myservice: a team's change to the DurabilitySemaphore holder, and what it promises.

The team calls an external API that cancels any reservation not used
within 3 seconds, so a permit granted must be claimed within that window:
the holder's claim deadline is shortened from the reference's 10 s to 2 s
(:mod:`myservice.variants`). The promise is an invariant of their own
(:mod:`myservice.invariants`), and the story they worried about, a holder
evicted twice while grants are out, a scenario (:mod:`myservice.scenarios`).
semsim judges the change by its own safety and liveness invariants and
theirs, under every fault it injects.
"""
