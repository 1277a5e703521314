"""Hypothesis profiles: ``ci`` (default, derandomized and bounded), ``dev``, ``nightly``.

Choose with ``pytest --hypothesis-profile=dev``. The example database lives in
``.hypothesis-db/`` inside the project so a failure found once replays first.
"""

from __future__ import annotations

from pathlib import Path

from hypothesis import HealthCheck, settings
from hypothesis.database import DirectoryBasedExampleDatabase

DATABASE = DirectoryBasedExampleDatabase(str(Path(__file__).resolve().parent.parent / ".hypothesis-db"))

settings.register_profile(
    "ci",
    derandomize=True,
    database=None,
    deadline=None,
    max_examples=150,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile(
    "dev",
    database=DATABASE,
    deadline=None,
    max_examples=500,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile(
    "nightly",
    database=DATABASE,
    deadline=None,
    max_examples=5_000,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.load_profile("ci")
