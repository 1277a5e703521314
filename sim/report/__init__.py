"""Reading runs back: usage plots of traces, and recorded traffic replayed through the holder.

Sits on ``semsim.harness`` and everything below it; independent of ``semsim.explore``.
"""
