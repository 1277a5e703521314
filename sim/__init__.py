"""semsim: deterministic simulation and fuzzing of concurrency-limit protocols.

The package is the directory ``sim/`` (and ``scenarios/`` is ``semsim.scenarios``:
pyproject.toml maps them), in layers; each package imports only the ones below it.

From the top: ``cli`` (the ``semsim`` command), ``explore`` and ``report``
(searching for failures; reading runs back), ``harness`` (a world built,
checked and run), ``check`` (the judges of a run), ``world`` (what is
simulated), ``runtime`` (the deterministic kernel), ``inputs`` (what a
person hands in). README.md's "Layout" says what each holds; the contracts
in pyproject.toml (run by tests/test_layout.py) enforce the order.
"""

#: The one place semsim's version is written: pyproject.toml reads it, traces and results
#: databases record it, and ``semsim --version`` prints it.
__version__ = "0.1.0"
