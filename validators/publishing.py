"""What a validator publishes of a window it checked, in order: its findings, its replay receipts,
its signed report, then the accepted updates' blobs and manifests and the aggregate they make
(`validators.aggregating`), whose hash it anchors on chain. Every object goes through `put`, which
tries again through an outage of the validator's store while it still counts
(`validators.own_store`)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

from distrai.chain.base import Chain, ChainError, WalletLike
from distrai.protocol.announce import Announcement
from distrai.protocol.globalmodel import GlobalModel
from distrai.protocol.layout import aggregate_key, receipts_key, report_key
from distrai.protocol.runtime import Runtime
from distrai.store.base import blob_key
from distrai.wire import sha256_hex, sign_document
from distrai.wire.window_documents import Receipt
from validators.aggregating import Tamper, aggregate_manifest, chosen_updates
from validators.checks import MinerVerdict
from validators.findings import publish_findings
from validators.held_window import HeldWindow
from validators.own_store import Publish
from validators.receipts import own_receipts, signed_receipts
from validators.validator_state import OwnAggregate, ValidatorState
from validators.window_record import Published
from validators.window_report import Found, window_report

log = logging.getLogger("distrai.validator")


@dataclass(frozen=True)
class WindowPublication:
    """One window's publishing by the validator of `wallet`, which checked it (`held`)."""

    runtime: Runtime
    wallet: WalletLike
    chain: Chain
    store_url: str
    """where the validator publishes, as its aggregate's anchor names it"""
    held: HeldWindow
    put: Publish

    @property
    def window(self) -> int:
        return self.held.window

    def publish(
        self,
        found: Found,
        state: ValidatorState,
        model: GlobalModel,
        observed_block: int,
        receipted: Callable[[list[Receipt]], list[Receipt]],
        tamper: Tamper,
    ) -> tuple[Published, OwnAggregate | None]:
        """Publish the window: what was published, and the validator's own aggregate (None when
        none was published). `state` has the window folded in; `receipted` and `tamper` are the
        leader behaviour's hooks."""
        me = self.wallet.hotkey.ss58_address
        findings = publish_findings(self.runtime, self.held, self.wallet.hotkey, self.put)
        receipts = receipted(own_receipts(self.held, me))
        if receipts:
            run_id = self.runtime.run_id
            self.put(
                receipts_key(run_id, self.window, me),
                signed_receipts(self.wallet.hotkey, run_id, self.window, receipts),
            )
        report = self.report(found, state, observed_block)
        if report is None:
            return Published(findings, len(receipts), []), None
        accepted, own = self.aggregate(found.verdicts, model, report, tamper)
        return Published(findings, len(receipts), accepted), own

    def report(self, found: Found, state: ValidatorState, observed_block: int) -> bytes | None:
        """Publish the signed report (`validators.window_report`); its bytes (the aggregate names
        their hash), None when it could not be published."""
        me = self.wallet.hotkey.ss58_address
        body = window_report(self.runtime, me, self.window, observed_block, found, state)
        document = sign_document(self.wallet.hotkey, body.body())
        if not self.put(report_key(self.runtime.run_id, self.window, me), document):
            return None
        return document

    def aggregate(
        self, verdicts: list[MinerVerdict], model: GlobalModel, report: bytes, tamper: Tamper
    ) -> tuple[list[MinerVerdict], OwnAggregate | None]:
        """Publish the aggregate the run's rule takes from the report, with the blobs and manifests
        it names, and anchor its hash on chain: the updates accepted and the aggregate as kept here
        (nothing when an object did not land)."""
        w, me = self.window, self.wallet.hotkey.ss58_address
        chosen = chosen_updates(self.runtime, self.held, verdicts)
        for v, _ in chosen:
            assert v.blob is not None and v.manifest_bytes is not None, "an accepted update passed its checks"
            for blob in (v.blob, v.manifest_bytes):
                if not self.put(blob_key(sha256_hex(blob)), blob):
                    log.error("window %d: the accepted updates could not be published, so no aggregate", w)
                    return [], None
        body = aggregate_manifest(self.runtime, w, model, report, chosen, tamper)
        document = sign_document(self.wallet.hotkey, body.body())
        if not self.put(aggregate_key(self.runtime.run_id, w, me), document):
            return [], None
        try:
            anchor = Announcement(store_url=self.store_url, window=w, aggregate_sha256=sha256_hex(document))
            self.chain.commit(self.wallet, anchor.encode())
        except ChainError as exc:
            log.error("window %d: could not anchor the aggregate on chain: %s", w, exc)
        own = OwnAggregate(
            window=w, result_hash=body.result_hash, accepted=sorted(a.hotkey for a in body.accepted)
        )
        return [v for v, _ in chosen], own
