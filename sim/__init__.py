"""semsim's simulator, in layers; each package imports only the ones below it.

From the top: ``cli`` (the ``semsim`` command), ``explore`` and ``report``
(searching for failures; reading runs back), ``harness`` (a world built,
checked and run), ``check`` (the judges of a run), ``world`` (what is
simulated), ``runtime`` (the deterministic kernel), ``inputs`` (what a
person hands in). README.md's "Layout" says what each holds; the contracts
in pyproject.toml (run by tests/test_layout.py) enforce the order.
"""
