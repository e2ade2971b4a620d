"""Where each document and blob of a run lives in a store. One place, so every node agrees."""

from __future__ import annotations


def window_prefix(run_id: str, window: int) -> str:
    return f"runs/{run_id[:16]}/w{window:08d}"


def manifest_key(run_id: str, window: int, hotkey: str) -> str:
    return f"{window_prefix(run_id, window)}/manifests/{hotkey}.json"


def states_prefix(run_id: str, window: int, hotkey: str) -> str:
    """Every revealed boundary state of one miner in one window."""
    return f"{window_prefix(run_id, window)}/states/{hotkey}/"


def state_key(run_id: str, window: int, hotkey: str, step: int) -> str:
    """A revealed boundary state (parameters and inner-optimizer state after `step` inner steps)."""
    return f"{states_prefix(run_id, window, hotkey)}{step:06d}.safetensors"


def findings_prefix(run_id: str, window: int, validator_hotkey: str) -> str:
    """Every finding one validator published about the miners of one window."""
    return f"{window_prefix(run_id, window)}/findings/{validator_hotkey}/"


def finding_key(run_id: str, window: int, validator_hotkey: str, miner_hotkey: str) -> str:
    """A validator's signed finding that a miner's reveal of `window` failed its replay checks."""
    return f"{findings_prefix(run_id, window, validator_hotkey)}{miner_hotkey}.json"


def aggregate_key(run_id: str, window: int, validator_hotkey: str) -> str:
    """Per validator: stores may be shared (one bucket for a whole local network)."""
    return f"{window_prefix(run_id, window)}/aggregates/{validator_hotkey}.json"


def report_key(run_id: str, window: int, validator_hotkey: str) -> str:
    return f"{window_prefix(run_id, window)}/reports/{validator_hotkey}.json"


def checkpoint_prefix(run_id: str, validator_hotkey: str) -> str:
    return f"runs/{run_id[:16]}/checkpoints/{validator_hotkey}/"


def checkpoint_key(run_id: str, window: int, validator_hotkey: str) -> str:
    """A full checkpoint of G_window (the base of `window`) with the outer optimizer's state."""
    return f"{checkpoint_prefix(run_id, validator_hotkey)}w{window:08d}.safetensors"


def checkpoint_window(key: str) -> int | None:
    """The window of a checkpoint key, or None for a key that is not one."""
    name = key.rsplit("/", 1)[-1]
    if not (name.startswith("w") and name.endswith(".safetensors")):
        return None
    digits = name[1 : -len(".safetensors")]
    return int(digits) if digits.isdigit() else None


def trajectory_key(run_id: str, window: int, hotkey: str) -> str:
    """A challenged miner's trajectory reveal (`distrai.protocol.trajectory`): the piece digests of its last
    state and residuals, and the drawn pieces of its last parameters and incoming residual."""
    return f"{window_prefix(run_id, window)}/trajectories/{hotkey}.safetensors"


def receipts_key(run_id: str, window: int, validator_hotkey: str) -> str:
    """A validator's signed receipts for the replays of its share of `window` (`validators.receipts`)."""
    return f"{window_prefix(run_id, window)}/receipts/{validator_hotkey}.json"


def measurements_key(run_id: str, window: int, validator_hotkey: str) -> str:
    """A validator's signed measurements of the updates of its share of `window`'s miners
    (`validators.shared_scoring`)."""
    return f"{window_prefix(run_id, window)}/measurements/{validator_hotkey}.json"
