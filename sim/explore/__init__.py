"""Searching for failures: case strategies, fuzz campaigns and shrinking, the mutation score.

Sits on ``semsim.harness`` and everything below it, and on ``scenarios`` (the
named scenarios run first in every campaign). Independent of ``semsim.report``.
"""
