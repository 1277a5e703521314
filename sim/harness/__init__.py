"""A world built from its parts, watched by its checks and run on the runtime: ``run.run_world``.

The one place the layers below meet: it may import ``semsim.check``,
``semsim.world``, ``semsim.runtime`` and ``semsim.inputs``.
"""
