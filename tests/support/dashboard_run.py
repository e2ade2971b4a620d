"""A run the dashboard can read, made by hand: an embedded chain whose clock moves only when a test
moves it, a file store, registered validators and miners that announce it, the owner's run
commitment, and signed reports written as a test wants them (hostile ones included)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import bittensor as bt

from distrai.dashboard.live import Live
from distrai.dashboard.nodes import NodeMetrics, wallet_labels
from distrai.dashboard.reading import RunReader
from distrai.protocol.announce import Announcement
from distrai.protocol.layout import report_key
from distrai.protocol.run import RunConfig, load_run_config, run_commitment, run_id
from distrai.protocol.sync import StoreCache
from distrai.store import open_store
from distrai.wire import sign_document
from support.local_harness import LocalHarness, make_local_harness

CONFIG = Path(__file__).parent / "shared-localnet.toml"


def entry(uid: int, score: float = 0.5, reason: str | None = None, **numbers: float) -> dict:
    """A miner's line in a report: every check passed, or the `reason` given failed `replay`."""
    verdicts = {"manifest": "pass", "update": "pass", "useful": "pass"}
    if reason is not None:
        verdicts["replay"] = reason
        score = 0.0
    return {
        "uid": uid,
        "verdicts": verdicts,
        "numbers": numbers,
        "score": score,
        "reason": reason and f"replay: {reason}",
    }


@dataclass
class TinyRun:
    harness: LocalHarness
    config: RunConfig
    store_url: str
    validators: list[bt.Wallet]
    miners: list[bt.Wallet]

    @property
    def run_id(self) -> str:
        return run_id(self.config)

    def uid(self, wallet: bt.Wallet) -> int:
        return self.harness.chain.metagraph().uid_of(wallet.hotkey.ss58_address)

    def report_body(self, validator: bt.Wallet, window: int, miners: dict[str, dict]) -> dict:
        return {
            "kind": "report",
            "run_id": self.run_id,
            "window": window,
            "validator": validator.hotkey.ss58_address,
            "observed_block": 0,
            "miners": miners,
            "refused": [],
            "rechecks": [],
        }

    def publish_report(
        self, validator: bt.Wallet, window: int, miners: dict[str, dict], *, data: bytes | None = None
    ) -> None:
        """Put `validator`'s report of `window` in the store: signed by it, or the bytes `data` as given."""
        document = (
            sign_document(validator.hotkey, self.report_body(validator, window, miners))
            if data is None
            else data
        )
        open_store(self.store_url).put(
            report_key(self.run_id, window, validator.hotkey.ss58_address), document
        )

    def reader(self, chain_path: Path | None = None) -> RunReader:
        from distrai.chain.local import LocalChain

        path = self.harness.chain.path if chain_path is None else chain_path
        return RunReader(self.config, lambda: LocalChain(path, 1), StoreCache())

    def live(self, chain_path: Path | None = None) -> Live:
        return Live(self.reader(chain_path), NodeMetrics([]), wallet_labels(self.harness.wallet_path))


def make_tiny_run(
    tmp_path: Path, *, validators: int = 2, miners: int = 2, store_url: str | None = None
) -> TinyRun:
    """A run in its first window, at a block past the first epoch (so the validators hold permits).
    Every node announces `store_url` (default: a file store in `tmp_path`)."""
    h = make_local_harness(tmp_path)
    config = load_run_config(CONFIG)
    url = store_url or f"file://{tmp_path / 'store'}"
    owner = h.owner()
    h.chain.register(owner)
    h.chain.commit(owner, run_commitment(config))
    made = {"validator": [], "miner": []}
    for role, count in (("validator", validators), ("miner", miners)):
        for i in range(count):
            wallet = h.new_wallet(f"{role}{i}")
            h.chain.register(wallet)
            if role == "validator":
                h.add_stake(wallet, 1000.0 * (validators - i))
            h.chain.commit(wallet, Announcement(store_url=url).encode())
            made[role].append(wallet)
    h.advance(h.chain.hyperparameters().tempo + 2)
    return TinyRun(h, config, url, made["validator"], made["miner"])
