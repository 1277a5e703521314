"""The judges of a run: invariants, allocation checks, the literal model in lockstep, coverage.

They read the world's objects (``semsim.world``) and the runtime's; neither of
those imports them back. A violation stops a run by raising a subclass of
``semsim.runtime.kernel.StopRun``, and the objects know the monitor only as the
protocols they define.
"""
