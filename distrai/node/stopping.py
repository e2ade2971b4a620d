"""Stopping a node cleanly on SIGINT or SIGTERM. Light on purpose: the entry points install it before
they import torch and the rest, so a Ctrl-C at any moment of start-up (imports, building the model,
restoring state) stops the node with exit status 0 instead of a KeyboardInterrupt."""

from __future__ import annotations

import logging
import signal
import sys
import threading

log = logging.getLogger(__name__)


def stop_on_signals() -> threading.Event:
    """An event set by SIGINT or SIGTERM, so a node finishes its current step and exits cleanly."""
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    return stop


def chain_lost(role: str, error: Exception, stop: threading.Event) -> int:
    """The exit status of a node whose loop ended on a chain read that failed (`ChainError`): 0 when
    the node was stopping (a read waiting through an outage gives up for the stop signal), else 1,
    with one line naming the chain's error (for an outage, the read had waited its patience,
    `distrai.chain.subtensor.READ_PATIENCE_S`); the traceback goes to the debug log."""
    log.debug("%s: the chain read that ended its loop", role, exc_info=error)
    if stop.is_set():
        log.info("%s stopped while its chain could not be read (%s)", role, error)
        return 0
    print(f"{role} stopped: its chain could not be read: {error}", file=sys.stderr)
    return 1
