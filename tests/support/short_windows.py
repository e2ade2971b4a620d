"""A run config's windows cut to 4 one-step segments, for the tests of what a validator does with a
window (reads through outages, withheld reveals, findings, receipts, pay) rather than of training."""

from __future__ import annotations

from distrai.protocol.run import RunConfig


def short_windows(config: RunConfig) -> RunConfig:
    """`config` with windows of 4 one-step segments, not the adversary config's 4 of three steps:
    each segment is still challenged and replayed, at a third of the training and replay."""
    return config.model_copy(
        update={"train": config.train.model_copy(update={"inner_steps": 4, "segment_steps": 1})}
    )
