"""The ``semsim`` command: argument parsing and dispatch (``main``), ``semsim fuzz`` and the demo.

The top layer: it may import every package below. The other commands' work
lives with its concept (``scenarios.cli``, ``sim.report``, ``sim.explore``)
and is imported by name when the command runs.
"""
