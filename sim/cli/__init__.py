"""The ``semsim`` command: argument parsing and dispatch (``main``), ``semsim fuzz`` and the demo.

The top layer: it may import every package below. The other commands' work
lives with its concept (``semsim.cli.scenario_commands``, ``semsim.report``, ``semsim.explore``)
and is imported by name when the command runs.
"""
