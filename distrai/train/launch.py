"""What torchrun told this process (`distrai.train.parallel` runs the ranks), in a module that imports
no torch: the miner (`miners.main`) asks whether it is one of several ranks before it makes the
checks that need no model (`distrai.node.build`), and imports torch after them."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch


@dataclass(frozen=True)
class Launch:
    """What torchrun told this process."""

    rank: int
    world: int
    local_rank: int

    def device(self, requested: str) -> torch.device:
        """`cuda` becomes this rank's GPU (`cuda:LOCAL_RANK`); a CPU stays the CPU."""
        import torch

        device = torch.device(requested)
        if device.type == "cuda":
            return torch.device("cuda", self.local_rank)
        return device


def launched() -> Launch | None:
    """This process's ranks when torchrun started more than one, else None."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world <= 1:
        return None
    return Launch(int(os.environ["RANK"]), world, int(os.environ.get("LOCAL_RANK", os.environ["RANK"])))
