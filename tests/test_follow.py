"""A follower refuses every aggregate that is not the miners' committed work weighted by the
aggregator's own signed report, names the aggregator, and falls back to the next validator by
stake. In one process: an embedded chain with a frozen clock, a file store, real updates through
the run's codec, manifests and reports signed by their hotkeys, and the project's `Syncer`."""

from __future__ import annotations

import hashlib
import logging
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import torch
from support.local_harness import make_local_harness
from test_validator_checks import manifest_body

from distrai.protocol.aggregation import Scored, accepted_by_rule
from distrai.protocol.announce import Announcement
from distrai.protocol.globalmodel import GlobalModel, SyncUnavailable, outer_config
from distrai.protocol.layout import aggregate_key, manifest_key, report_key
from distrai.protocol.run import load_run_config
from distrai.protocol.runtime import build_runtime, params_hash
from distrai.protocol.standing import standing_lines
from distrai.protocol.sync import StoreCache, Syncer, peer_view
from distrai.protocol.update import encode_update
from distrai.protocol.windows import (
    aggregate_deadline,
    commit_deadline,
    reveal_deadline,
    reveal_seed,
    window_start,
)
from distrai.store import FileStore
from distrai.train.outer import Contribution, OuterState, outer_state_hash, outer_step
from distrai.wire import sign_document

CONFIG = Path(__file__).parent / "support" / "adversary-localnet.toml"
WINDOW = 2


@pytest.fixture(scope="module")
def runtime():
    return build_runtime(load_run_config(CONFIG))


@dataclass
class Network:
    """A window's miners and validators on one chain and one store, with what they published."""

    runtime: object
    harness: object
    store: FileStore
    model: GlobalModel
    miners: dict = field(default_factory=dict)
    validators: dict = field(default_factory=dict)
    updates: dict = field(default_factory=dict)
    blobs: dict = field(default_factory=dict)
    manifests: dict = field(default_factory=dict)

    @property
    def cfg(self):
        return self.runtime.config.windows

    def at(self, block: int) -> None:
        self.harness.advance(block - self.harness.local.block())

    def update(self, seed: int) -> dict[str, torch.Tensor]:
        generator = torch.Generator().manual_seed(seed)
        return {n: 1e-3 * torch.randn(p.shape, generator=generator) for n, p in self.model.params.items()}

    def commit_update(self, name: str, seed: int, update: dict[str, torch.Tensor] | None = None) -> None:
        """Encode, sign and anchor a miner's update (`update`, else noise drawn from `seed`): the chain
        holds the manifest's hash."""
        wallet, rt = self.miners[name], self.runtime
        hotkey = wallet.hotkey.ss58_address
        encoded = rt.codec.encode(self.update(seed) if update is None else update, None)
        blob = encode_update(encoded.payload, encoded.metadata, hotkey, WINDOW)
        shapes = {n: tuple(p.shape) for n, p in self.model.params.items()}
        self.updates[name] = rt.codec.decode(encoded.payload, encoded.metadata, shapes)
        body = manifest_body(rt, self.model, blob, encoded.metadata, hotkey, window=WINDOW)
        manifest = sign_document(wallet.hotkey, body)
        self.store.put(manifest_key(rt.run_id, WINDOW, hotkey), manifest)
        self.store.put_blob(blob)
        self.blobs[name], self.manifests[name] = blob, manifest
        self.harness.chain.commit(
            wallet,
            Announcement(
                store_url=self.store.url,
                window=WINDOW,
                manifest_sha256=hashlib.sha256(manifest).hexdigest(),
                segments=rt.config.train.n_segments,
            ).encode(),
        )

    def publish_aggregate(self, validator: str, scores: dict[str, float], tamper=None, anchor=True) -> bytes:
        """A validator's report with these scores (a miner absent from `scores` failed a check),
        the aggregate the rule gives from it (changed by `tamper`), and its anchor on chain."""
        wallet, rt = self.validators[validator], self.runtime
        hotkeys = {name: w.hotkey.ss58_address for name, w in self.miners.items()}
        report = sign_document(
            wallet.hotkey,
            {
                "kind": "report",
                "run_id": rt.run_id,
                "window": WINDOW,
                "validator": wallet.hotkey.ss58_address,
                "observed_block": reveal_deadline(self.cfg, WINDOW),
                "miners": {
                    hotkeys[name]: {
                        "uid": i,
                        "verdicts": {"update": "pass" if name in scores else "wrong_owner: copied"},
                        "numbers": {"drop_unseen": scores[name]} if name in scores else {},
                        "score": scores.get(name, 0.0),
                        "reason": None if name in scores else "update: wrong_owner: copied",
                    }
                    for i, name in enumerate(self.miners)
                },
                "refused": [],
            },
        )
        by_hotkey = {hotkeys[name]: name for name in self.miners}
        seed = reveal_seed(
            self.harness.local.block_hash(commit_deadline(self.cfg, WINDOW)), rt.run_id, WINDOW
        )
        chosen = accepted_by_rule(
            {hotkeys[n]: Scored(n in scores, scores.get(n, 0.0), scores.get(n, 0.0)) for n in self.miners},
            rt.config.scoring.aggregate_top_n,
            seed,
        )
        accepted = [
            {
                "hotkey": hk,
                "manifest_sha256": hashlib.sha256(self.manifests[by_hotkey[hk]]).hexdigest(),
                "update_sha256": hashlib.sha256(self.blobs[by_hotkey[hk]]).hexdigest(),
                "weight": weight,
            }
            for hk, weight in chosen
        ]
        contributions = [Contribution(hk, self.updates[by_hotkey[hk]], w) for hk, w in chosen]
        if tamper is not None:
            accepted, contributions = tamper(self, accepted, contributions)
        result = outer_step(self.model.params, contributions, self.model.outer, outer_config(rt.config.outer))
        for a in accepted:
            self.store.put_blob(self.manifests[by_hotkey[a["hotkey"]]])
        self.store.put(report_key(rt.run_id, WINDOW, wallet.hotkey.ss58_address), report)
        aggregate = sign_document(
            wallet.hotkey,
            {
                "kind": "aggregate",
                "run_id": rt.run_id,
                "window": WINDOW,
                "base_hash": self.model.hash,
                "report_sha256": hashlib.sha256(report).hexdigest(),
                "accepted": accepted,
                "result_hash": params_hash(result.params),
                "outer_hash": outer_state_hash(result.state),
            },
        )
        self.store.put(aggregate_key(rt.run_id, WINDOW, wallet.hotkey.ss58_address), aggregate)
        if anchor:
            self.anchor(validator, aggregate)
        return aggregate

    def anchor(self, validator: str, aggregate: bytes) -> None:
        self.harness.chain.commit(
            self.validators[validator],
            Announcement(
                store_url=self.store.url,
                window=WINDOW,
                aggregate_sha256=hashlib.sha256(aggregate).hexdigest(),
            ).encode(),
        )

    def follow(self) -> tuple[Syncer, GlobalModel]:
        """Follow the window once its aggregate deadline has passed (on pipelined windows, in the
        window after next)."""
        self.at(max(self.harness.local.block(), aggregate_deadline(self.cfg, WINDOW)))
        syncer = Syncer(self.runtime, self.harness.chain, StoreCache())
        return syncer, syncer.step(self.model, peer_view(self.harness.chain))


class Outage:
    """Every path under the network's store fails (ELOOP) until `end`; nothing is missing."""

    def __init__(self, net: Network):
        self.root = net.store.root
        self.root.rename(self.root.with_name("store-away"))
        self.root.symlink_to(self.root)

    def end(self) -> None:
        self.root.unlink()
        self.root.with_name("store-away").rename(self.root)


def build_network(runtime, tmp_path, stakes=(3000.0, 2000.0), updates=None) -> Network:
    """Validators with `stakes` (most first) and three miners on one chain and store, at window
    `WINDOW`'s reveal deadline; each miner has committed its update of `updates` (by name), else noise."""
    harness = make_local_harness(tmp_path)
    store = FileStore(tmp_path / "store")
    model = GlobalModel(WINDOW, runtime.initial_params(), OuterState(momentum={}))
    network = Network(runtime, harness, store, model)
    for i, stake in enumerate(stakes):
        wallet = harness.new_wallet(f"validator{i}")
        harness.chain.register(wallet)
        harness.add_stake(wallet, stake)
        harness.chain.commit(wallet, Announcement(store_url=store.url).encode())
        network.validators[f"validator{i}"] = wallet
    for i in range(3):
        wallet = harness.new_wallet(f"miner{i}")
        harness.chain.register(wallet)
        network.miners[f"miner{i}"] = wallet
    network.at(window_start(network.cfg, WINDOW) + 1)
    assert all(n.validator_permit for n in harness.chain.metagraph().neurons[: len(stakes)])
    for i, name in enumerate(network.miners):
        network.commit_update(name, seed=i, update=(updates or {}).get(name))
        network.at(harness.local.block() + 1)
    network.at(reveal_deadline(network.cfg, WINDOW))
    return network


@pytest.fixture
def net(runtime, tmp_path):
    return build_network(runtime, tmp_path)


HONEST_SCORES = {"miner0": 1.0, "miner1": 0.8}


def poison(net, accepted, contributions):
    """The first accepted update swapped for a blob no miner committed, labelled with that miner."""
    hotkey = accepted[0]["hotkey"]
    noise = {n: 100 * t for n, t in net.update(seed=99).items()}
    encoded = net.runtime.codec.encode(noise, None)
    blob = encode_update(encoded.payload, encoded.metadata, hotkey, WINDOW)
    net.store.put_blob(blob)
    shapes = {n: tuple(p.shape) for n, p in net.model.params.items()}
    decoded = net.runtime.codec.decode(encoded.payload, encoded.metadata, shapes)
    first = {**accepted[0], "update_sha256": hashlib.sha256(blob).hexdigest()}
    return [first, *accepted[1:]], [
        Contribution(hotkey, decoded, contributions[0].weight),
        *contributions[1:],
    ]


def reweight(net, accepted, contributions):
    return (
        [{**accepted[0], "weight": 0.9}, {**accepted[1], "weight": 0.1}],
        [
            Contribution(contributions[0].key, contributions[0].pseudo_gradient, 0.9),
            Contribution(contributions[1].key, contributions[1].pseudo_gradient, 0.1),
        ],
    )


def include_rejected(net, accepted, contributions):
    """Adds miner2, whom the report says a check rejected."""
    name, hotkey = "miner2", net.miners["miner2"].hotkey.ss58_address
    extra = {
        "hotkey": hotkey,
        "manifest_sha256": hashlib.sha256(net.manifests[name]).hexdigest(),
        "update_sha256": hashlib.sha256(net.blobs[name]).hexdigest(),
        "weight": 0.2,
    }
    scaled = [{**a, "weight": a["weight"] * 0.8} for a in accepted]
    return (
        [*scaled, extra],
        [
            *(Contribution(c.key, c.pseudo_gradient, c.weight * 0.8) for c in contributions),
            Contribution(hotkey, net.updates[name], 0.2),
        ],
    )


def test_an_honest_leaders_aggregate_is_followed(net):
    net.publish_aggregate("validator0", HONEST_SCORES)
    net.at(aggregate_deadline(net.cfg, WINDOW))
    syncer, following = net.follow()
    leader = net.validators["validator0"].hotkey.ss58_address
    assert syncer.followed[WINDOW][0] == leader
    assert following.window == WINDOW + 1 and following.hash != net.model.hash
    assert syncer.take_refusals() == []
    # what each miner's log says of the window, from the reports the follower weighed
    settled = syncer.take_settled()
    assert [s.window for s in settled] == [WINDOW] and syncer.take_settled() == []
    top_n = net.runtime.config.scoring.aggregate_top_n
    taken, _, copied = (standing_lines(m.hotkey.ss58_address, settled, top_n)[0] for m in net.miners.values())
    # measured gains 1.0 and 0.8: weights 1.0 / 1.8 and 0.8 / 1.8
    assert taken.startswith(f"window {WINDOW}: taken into the global model, weight 0.556; scores: ")
    assert copied.startswith(
        f"window {WINDOW}: not in the global model: the followed validator rejected it: "
        "update: wrong_owner: copied; scores: "
    )


@pytest.mark.parametrize(
    ("tamper", "words"),
    [
        (poison, "that the miner's signed manifest does not name"),
        (reweight, "but its signed report's scores give"),
        (include_rejected, "but its signed report's scores give"),
    ],
    ids=["poisoned", "re-weighted", "takes-a-rejected-update"],
)
def test_a_steering_leader_is_refused_named_and_the_next_by_stake_followed(net, tamper, words):
    net.publish_aggregate("validator0", HONEST_SCORES, tamper=tamper)
    net.publish_aggregate("validator1", HONEST_SCORES)
    net.at(aggregate_deadline(net.cfg, WINDOW))
    syncer, following = net.follow()
    leader = net.validators["validator0"].hotkey.ss58_address
    (refusal,) = syncer.take_refusals()
    assert (refusal.validator, refusal.window) == (leader, WINDOW)
    assert words in refusal.reason, refusal.reason
    assert syncer.followed[WINDOW][0] == net.validators["validator1"].hotkey.ss58_address
    assert following.hash == syncer.followed[WINDOW][1].result_hash


def test_an_aggregate_anchored_after_the_deadline_does_not_count(net):
    late = net.publish_aggregate("validator0", HONEST_SCORES, anchor=False)
    net.at(aggregate_deadline(net.cfg, WINDOW))
    net.anchor("validator0", late)
    syncer, following = net.follow()
    assert WINDOW not in syncer.followed and following.hash == net.model.hash
    assert syncer.take_refusals() == []


def test_an_aggregate_changed_after_its_anchor_is_refused(net):
    net.publish_aggregate("validator0", HONEST_SCORES)
    net.publish_aggregate("validator0", {"miner0": 1.0}, anchor=False)
    net.at(aggregate_deadline(net.cfg, WINDOW))
    syncer, _ = net.follow()
    (refusal,) = syncer.take_refusals()
    assert "not the one anchored on chain" in refusal.reason


def test_a_manifest_the_miner_replaced_after_the_commit_deadline_is_refused(net):
    assert net.harness.local.block() > commit_deadline(net.cfg, WINDOW)
    net.commit_update("miner0", seed=7)
    net.publish_aggregate("validator0", HONEST_SCORES)
    net.at(aggregate_deadline(net.cfg, WINDOW))
    syncer, _ = net.follow()
    (refusal,) = syncer.take_refusals()
    assert "not the one that miner anchored on chain before the commit deadline" in refusal.reason


def test_an_aggregate_out_of_reach_is_waited_for_then_passed_over_a_window_after_its_deadline(net):
    net.publish_aggregate("validator0", HONEST_SCORES)
    net.at(aggregate_deadline(net.cfg, WINDOW))
    outage = Outage(net)
    live = Syncer(net.runtime, net.harness.chain, StoreCache())
    with pytest.raises(SyncUnavailable, match="cannot be fetched"):
        live.step(net.model, peer_view(net.harness.chain))

    net.at(aggregate_deadline(net.cfg, WINDOW) + net.cfg.blocks_per_window)
    late = Syncer(net.runtime, net.harness.chain, StoreCache())
    with pytest.raises(SyncUnavailable):  # a node that comes late to the outage waits it out
        late.step(net.model, peer_view(net.harness.chain))
    following = live.step(net.model, peer_view(net.harness.chain))
    assert following.hash == net.model.hash and WINDOW not in live.followed
    assert [r.window for r in live.take_refusals()] == [WINDOW]

    outage.end()
    following = late.step(net.model, peer_view(net.harness.chain))
    assert late.followed[WINDOW][0] == net.validators["validator0"].hotkey.ss58_address


def test_a_node_waiting_for_an_aggregate_out_of_reach_says_so_once_and_once_more_when_it_is_back(net, caplog):
    net.publish_aggregate("validator0", HONEST_SCORES)
    net.at(aggregate_deadline(net.cfg, WINDOW))
    outage = Outage(net)
    syncer = Syncer(net.runtime, net.harness.chain, StoreCache())
    caplog.set_level(logging.INFO, logger="distrai.protocol.sync")
    for _ in range(5):  # a node tries again every block or so
        with pytest.raises(SyncUnavailable):
            syncer.step(net.model, peer_view(net.harness.chain))
    outage.end()
    syncer.step(net.model, peer_view(net.harness.chain))

    aggregate = f"window {WINDOW}: {net.validators['validator0'].hotkey.ss58_address[:10]}'s aggregate"
    said = [r.getMessage() for r in caplog.records if r.getMessage().startswith(aggregate)]
    assert len(said) == 2, said
    assert said[0].startswith(f"{aggregate} is out of reach: ")
    assert said[1].startswith(f"{aggregate} answered again after ")


def test_a_node_starting_in_an_outage_says_once_that_the_checkpoints_cannot_be_listed(net, caplog):
    """A node with no model yet looks for a checkpoint first; through an outage it asks again at every
    try, and says so once when the outage starts and once when it ends, not once a try."""
    net.publish_aggregate("validator0", HONEST_SCORES)
    net.at(aggregate_deadline(net.cfg, WINDOW))
    outage = Outage(net)
    syncer = Syncer(net.runtime, net.harness.chain, StoreCache())
    caplog.set_level(logging.INFO, logger="distrai.protocol.sync")
    for _ in range(4):
        with pytest.raises(SyncUnavailable):
            syncer.catch_up(None, WINDOW + 1)
    outage.end()
    assert syncer.catch_up(None, WINDOW + 1).window == WINDOW + 1
    for wallet in net.validators.values():
        of = f"the checkpoint list of {wallet.hotkey.ss58_address[:10]}"
        said = [r.getMessage() for r in caplog.records if r.getMessage().startswith(of)]
        assert len(said) == 2, said
        assert said[0].startswith(f"{of} is out of reach") and said[1].startswith(
            f"{of} answered again after"
        )
