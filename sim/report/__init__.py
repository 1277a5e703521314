"""Reading runs back: usage plots of traces, and recorded traffic replayed through the holder.

Sits on ``sim.harness`` and everything below it; independent of ``sim.explore``.
"""
