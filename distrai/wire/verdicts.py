"""The names in a validator's report (`window_documents.MinerEntry`): its checks, the keys of a
miner's verdicts, and its numbers, the keys of what it measured.

Each is a `StrEnum`: a member is its string, so a report's JSON is the same whether it was built
from members or read back as plain strings, and `entry.verdicts[Check.REPLAY]` finds `"replay"`.
The validators write these names, the findings name one of the replay checks, and the dashboard and
the local network's report read them.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Final


class Check(StrEnum):
    """A check of a validator's verdict on one miner, in the order the validator runs them
    (`validators.checks`, `validators.replay_check`, `validators.window_scoring`)."""

    BANNED = "banned"
    """the hotkey is not barred for an earlier fraud"""
    STORE = "store"
    """the miner's store could be listed at the reveal deadline"""
    MANIFEST = "manifest"
    """the signed manifest is the one committed on chain, for this run and window"""
    CONSISTENCY = "consistency"
    """the manifest's fields agree with the run"""
    UPDATE = "update"
    """the update blob is there, the one the manifest names, and decodes"""
    COPY = "copy"
    """no other hotkey committed the identical update earlier"""
    DUPLICATE = "duplicate"
    """not nearly the same update as another hotkey's"""
    STATES = "states"
    """the revealed training states are the committed ones"""
    REPLAY = "replay"
    """the challenged segments replay to the committed states and losses"""
    TRAJECTORY = "trajectory"
    """the update is the codec's encoding of the committed training"""
    USEFUL = "useful"
    """the update alone lowers the loss of the sequences it was trained on"""


REPLAY_CHECKS: Final = (Check.STATES, Check.REPLAY, Check.TRAJECTORY)
"""The checks only the validators whose share holds a miner run; a finding names one of them."""

PASS: Final = "pass"
"""The verdict of a check that passed; anything else is the reason it failed."""


class Number(StrEnum):
    """What a validator measured of one miner's window: the keys of a report entry's numbers."""

    UPDATE_BYTES = "update_bytes"
    REVEALED_BYTES = "revealed_bytes"
    REPLAY_SECONDS = "replay_seconds"
    REPLAY_STEPS = "replay_steps"
    REPLAY_DISTANCE = "replay_distance"
    REPLAY_TOLERANCE = "replay_tolerance"
    MAX_COSINE = "max_cosine"
    DROP_TRAINED = "drop_trained"
    """`window_documents.Measurement`'s fields, copied into the numbers: these four"""
    DROP_UNSEEN = "drop_unseen"
    MARK = "mark"
    MARK_Z = "mark_z"
    TOKENS = "tokens"
    """the tokens the manifest commits to having trained"""
    VOUCHED = "vouched"
    """the tokens its measured gain vouches for (`validators.scoring.vouched_tokens`): the score's cap"""
