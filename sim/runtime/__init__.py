"""The deterministic kernel: virtual clock, seeded streams, trace, timers, network, Durable Objects, engine.

Knows nothing of what runs on it: it imports only ``semsim.inputs``. Whatever
judges a run stops it through ``kernel.StopRun``, is told of objects' lives
through ``durable.DurableMonitor``, and the network reads a fault plan
through ``network.MessageFaults``.
"""
