"""Stopping a node cleanly on SIGINT or SIGTERM. Light on purpose: the entry points install it before
they import torch and the rest, so a Ctrl-C at any moment of start-up (imports, building the model,
restoring state) stops the node with exit status 0 instead of a KeyboardInterrupt."""

from __future__ import annotations

import signal
import threading


def stop_on_signals() -> threading.Event:
    """An event set by SIGINT or SIGTERM, so a node finishes its current step and exits cleanly."""
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    return stop
