"""What is simulated: the holder and client objects, the job service, the workload, the fault plan.

Built on ``semsim.runtime`` and ``semsim.inputs``. The checkers that watch these
objects are passed in through protocols defined here (``HolderMonitor``,
``ClientMonitor``, ``ModelInLockstep``), never imported.
"""
