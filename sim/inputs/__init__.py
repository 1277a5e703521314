"""Checking what a person hands in: config and case-file fields, files, command-line outputs.

The bottom layer (it imports only ``semaphore_core``), shared by the config
classes of every layer and by the commands.
"""
