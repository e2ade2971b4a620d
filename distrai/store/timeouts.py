"""How long a node's S3 requests wait for a server: timeouts that follow the chain's pace.

botocore's defaults here (`S3Config`: 10-s connect, 60-s read) suit a CLI tool, not a node. A server
that accepts connections but never answers (a paused server, or a miner's endpoint that hangs on
purpose) holds each try for the whole read timeout, and `RetryPolicy` makes up to 5 tries: five
minutes of silence for one operation at 60 s, far longer than a window's validate phase. A node
opens every store it reads or writes with `node_store_timeouts(chain.block_time())` instead
(`distrai.node.build.build_node`); the CLI tools keep the defaults.
"""

from __future__ import annotations

from dataclasses import dataclass

READ_TIMEOUT_BLOCKS = 2.0
"""a read timeout of this many blocks"""
MIN_READ_TIMEOUT_S = 5.0
MAX_READ_TIMEOUT_S = 60.0
MAX_CONNECT_TIMEOUT_S = 10.0


@dataclass(frozen=True)
class StoreTimeouts:
    """Seconds an S3 request waits to connect, and for each read of its socket."""

    connect_s: float
    read_s: float

    def __post_init__(self) -> None:
        if not (self.connect_s > 0 and self.read_s > 0):
            raise ValueError(f"store timeouts must be positive, got {self}")


def node_store_timeouts(block_time_s: float) -> StoreTimeouts:
    """The S3 timeouts of a node on a chain of `block_time_s`-second blocks.

    read timeout    = clamp(2 × block time, 5 s, 60 s)
    connect timeout = min(10 s, read timeout)

    - 1-s blocks (cpu-localnet, gpu-smoke: the embedded chain): 2 × 1 = 2 s, raised to 5 s; connect 5 s.
    - 12-s blocks (gpu-subnet on finney, subtensor's block time): 2 × 12 = 24 s; connect 10 s.
    - 30-s blocks or slower: 60 s, today's default and the cap; connect 10 s.

    Why two blocks: the protocol's phases are counted in blocks (a reveal or validate phase is some
    tens of them), so a server silent for two blocks has already cost a visible part of a phase. An
    operation on a server that accepts connections but never answers gives up (`Unreachable`) after
    `RetryPolicy`'s 5 tries of one read timeout each plus its pauses (0.25 + 0.5 + 1 + 2 s at most):
    5 × 24 + 3.75 ≈ 124 s (about 10 blocks) at 12-s blocks, 5 × 5 + 3.75 ≈ 29 s at 1-s blocks,
    instead of 5 × 60 + 3.75 ≈ 304 s whatever the block time; and its first try's failure is logged
    after one read timeout, while the outage lasts. The 5-s floor keeps an ordinary slow answer (a
    loaded server, a long listing page) from being taken for an outage on fast-block local chains;
    the 60-s cap is botocore's default, never exceeded. The connect timeout is botocore's 10 s, or
    the read timeout when that is shorter: a request should not wait longer to connect than to hear.

    The read timeout bounds each wait for bytes on the socket (botocore's `read_timeout` is per
    socket read, not per transfer): a large object coming slowly but steadily, say several GB at
    100 Mbit/s, takes minutes and never trips it. Only a server that sends nothing for the whole
    timeout does.
    """
    if not block_time_s > 0:
        raise ValueError(f"block time must be positive, got {block_time_s}")
    read_s = min(MAX_READ_TIMEOUT_S, max(MIN_READ_TIMEOUT_S, READ_TIMEOUT_BLOCKS * block_time_s))
    return StoreTimeouts(connect_s=min(MAX_CONNECT_TIMEOUT_S, read_s), read_s=read_s)
