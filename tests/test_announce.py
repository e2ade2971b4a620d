"""A node's chain commitment is a model, written and read through it: each kind of announcement
round-trips through its string on chain (both chains), the strings are the ones nodes have always
written, a malformed commitment is refused naming what is wrong, and no commitment a miner publishes
can fail the node that reads it: it only leaves that miner out."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError
from support.local_harness import TEST_HYPERPARAMETERS, make_local_harness
from support.subtensor_harness import make_subtensor_harness

from distrai.chain.base import Commitment, Hyperparameters
from distrai.protocol.announce import (
    Announcement,
    anchored_aggregates,
    claims,
    committed_by_deadline,
    committed_updates,
    parse_announcement,
    sharing_validators,
)
from distrai.protocol.sync import peer_view
from distrai.protocol.windows import WindowConfig
from distrai.wire.errors import Reason, WireError

SHA = "ab" * 32
OTHER_SHA = "cd" * 32

urls = st.text(min_size=1, max_size=60)
windows = st.integers(min_value=0, max_value=2**70)
hashes = st.text("0123456789abcdef", min_size=64, max_size=64)
KINDS = {
    "store": st.builds(Announcement, store_url=urls),
    "manifest": st.builds(
        Announcement,
        store_url=urls,
        window=windows,
        manifest_sha256=hashes,
        segments=st.integers(min_value=1, max_value=2**40),
    ),
    "aggregate": st.builds(Announcement, store_url=urls, window=windows, aggregate_sha256=hashes),
}


@pytest.mark.parametrize("kind", sorted(KINDS))
@given(data=st.data())
@settings(max_examples=100, deadline=None)
def test_each_kind_round_trips_through_its_commitment(kind, data):
    announcement = data.draw(KINDS[kind])
    commitment = announcement.encode()
    assert Announcement.read(commitment) == announcement
    assert parse_announcement(commitment) == announcement


def test_the_strings_on_chain_are_the_ones_nodes_have_always_written():
    """Compact JSON, one letter per key, keys sorted, non-ASCII escaped: what nodes of earlier
    versions wrote and read, and what fits the chain's commitment limit."""
    assert Announcement(store_url="s3://b/p").encode() == '{"s":"s3://b/p"}'
    manifest = Announcement(store_url="file:///s", window=4, manifest_sha256=SHA, segments=46)
    assert manifest.encode() == f'{{"m":"{SHA}","n":46,"s":"file:///s","w":4}}'
    aggregate = Announcement(store_url="file:///v", window=7, aggregate_sha256=OTHER_SHA)
    assert aggregate.encode() == f'{{"a":"{OTHER_SHA}","s":"file:///v","w":7}}'
    assert Announcement(store_url="file:///é").encode() == '{"s":"file:///\\u00e9"}'
    spaced = f'{{ "w": 4, "s": "file:///s", "n": 46, "m": "{SHA}" }}'
    assert Announcement.read(spaced) == manifest


NOT_JSON = Reason.MALFORMED_JSON
MISSING = Reason.MISSING_FIELD
BAD = Reason.BAD_FIELD


@pytest.mark.parametrize(
    ("data", "reason", "named"),
    [
        ("file:///tmp/bucket", NOT_JSON, "Invalid JSON"),
        ("distrai-run:" + "0" * 64, NOT_JSON, "Invalid JSON"),
        ("[" * 1000, NOT_JSON, "recursion limit exceeded"),
        ('["s"]', NOT_JSON, "Input should be an object"),
        ('{"s":"x"} and more', NOT_JSON, "trailing characters"),
        ("{}", MISSING, "key 's' (store_url): Field required"),
        ('{"s":""}', BAD, "key 's' (store_url): String should have at least 1 character"),
        ('{"s":7}', BAD, "key 's' (store_url): Input should be a valid string"),
        ('{"store_url":"x"}', MISSING, "key 'store_url': Extra inputs are not permitted"),
        ('{"s":"x","q":1}', BAD, "key 'q': Extra inputs are not permitted"),
        ('{"s":"x","' + "q" * 200 + '":1}', BAD, "key '" + "q" * 65 + "…': Extra inputs"),
        ('{"s":"x","w":3}', BAD, "anchors one manifest or one aggregate, with its window"),
        (f'{{"s":"x","a":"{SHA}"}}', BAD, "anchors one manifest or one aggregate, with its window"),
        (f'{{"s":"x","w":-1,"a":"{SHA}"}}', BAD, "key 'w' (window): Input should be greater than"),
        (f'{{"s":"x","w":true,"a":"{SHA}"}}', BAD, "key 'w' (window): Input should be a valid integer"),
        (f'{{"s":"x","w":4.0,"a":"{SHA}"}}', BAD, "key 'w' (window): Input should be a valid integer"),
        (f'{{"s":"x","w":"4","a":"{SHA}"}}', BAD, "key 'w' (window): Input should be a valid integer"),
        (f'{{"s":"x","w":4,"a":"{SHA.upper()}"}}', BAD, "key 'a' (aggregate_sha256): String should match"),
        (f'{{"s":"x","w":4,"a":"{SHA}\\n"}}', BAD, "key 'a' (aggregate_sha256): String should match"),
        (f'{{"s":"x","w":4,"m":"{SHA[:-1]}","n":1}}', BAD, "key 'm' (manifest_sha256): String should match"),
        (f'{{"s":"x","w":4,"m":"{SHA}"}}', BAD, "a manifest anchor names the segments it claims"),
        (f'{{"s":"x","w":4,"a":"{SHA}","n":3}}', BAD, "a manifest anchor names the segments it claims"),
        (f'{{"s":"x","w":4,"m":"{SHA}","n":0}}', BAD, "key 'n' (segments): Input should be greater than"),
        (
            f'{{"s":"x","w":4,"m":"{SHA}","n":true}}',
            BAD,
            "key 'n' (segments): Input should be a valid integer",
        ),
        (
            f'{{"s":"x","w":4,"m":"{SHA}","n":"3"}}',
            BAD,
            "key 'n' (segments): Input should be a valid integer",
        ),
        (f'{{"s":"x","w":4,"m":"{SHA}","a":"{SHA}","n":3}}', BAD, "anchors one manifest or one aggregate"),
    ],
)
def test_a_malformed_commitment_is_refused_naming_what_is_wrong(data, reason, named):
    with pytest.raises(WireError) as refused:
        Announcement.read(data)
    assert refused.value.reason == reason
    assert named in refused.value.message
    assert parse_announcement(data) is None


def test_every_problem_of_a_commitment_is_named():
    with pytest.raises(WireError) as refused:
        Announcement.read('{"s":5,"w":-2,"a":"x"}')
    assert [part.split(":")[0] for part in refused.value.message.split("; ")] == [
        "key 's' (store_url)",
        "key 'w' (window)",
        "key 'a' (aggregate_sha256)",
    ]


def test_an_announcement_that_would_not_read_back_is_never_built():
    with pytest.raises(ValidationError, match="one manifest or one aggregate"):
        Announcement(store_url="file:///v", window=4, manifest_sha256=SHA, aggregate_sha256=OTHER_SHA)
    with pytest.raises(ValidationError, match="names the segments it claims"):
        Announcement(store_url="x", window=1, manifest_sha256=SHA)
    with pytest.raises(ValidationError, match="names the segments it claims"):
        Announcement(store_url="x", window=1, aggregate_sha256=SHA, segments=2)
    with pytest.raises(ValidationError, match="segments\n  Input should be greater than or equal to 1"):
        Announcement(store_url="x", window=1, manifest_sha256=SHA, segments=0)
    with pytest.raises(ValidationError, match="window\n  Input should be a valid integer"):
        Announcement(store_url="x", window=True, aggregate_sha256=SHA)
    with pytest.raises(ValidationError, match="store_url\n  Input should be a valid string, unable to parse"):
        Announcement(store_url="file:///tmp/\udcff")  # a byte of a path that is not UTF-8


@given(
    st.dictionaries(
        st.sampled_from(["s", "w", "m", "a", "n", "store_url", "x"]),
        st.one_of(
            st.none(),
            st.booleans(),
            st.integers(min_value=-3, max_value=2**64),
            st.floats(),
            st.text(max_size=8),
            hashes,
            st.lists(st.integers(), max_size=2),
        ),
    )
)
@settings(max_examples=300, deadline=None)
def test_any_commitment_object_reads_back_or_is_refused_by_name(body):
    try:
        announcement = Announcement.read(json.dumps(body))
    except WireError as refused:
        assert refused.reason in (Reason.MISSING_FIELD, Reason.BAD_FIELD)
        return
    assert Announcement.read(announcement.encode()) == announcement


@given(st.text(max_size=200))
@settings(max_examples=200, deadline=None)
def test_any_commitment_text_parses_or_is_ignored(text):
    parsed = parse_announcement(text)
    assert parsed is None or parse_announcement(parsed.encode()) == parsed


def test_announcements_filter_by_window_and_time():
    miner = Announcement(store_url="file:///s", window=4, manifest_sha256=SHA, segments=46)
    commitments = {
        "m1": Commitment("m1", miner.encode(), 10),
        "m2": Commitment(
            "m2",
            Announcement(store_url="file:///t", window=3, manifest_sha256="cd" * 32, segments=1).encode(),
            10,
        ),
        "m3": Commitment(
            "m3",
            Announcement(store_url="file:///u", window=4, manifest_sha256="ef" * 32, segments=2).encode(),
            99,
        ),
        "owner": Commitment("owner", "distrai-run:" + "0" * 64, 1),
        "v1": Commitment(
            "v1", Announcement(store_url="file:///v", window=4, aggregate_sha256="12" * 32).encode(), 40
        ),
        "v2": Commitment(
            "v2", Announcement(store_url="file:///w", window=3, aggregate_sha256="34" * 32).encode(), 40
        ),
    }
    assert committed_updates(commitments, 4, lambda block: block < 50) == {"m1": miner}
    assert set(anchored_aggregates(commitments, 4, lambda block: block < 50)) == {"v1"}
    assert claims(committed_updates(commitments, 4, lambda block: block < 100)) == {"m1": 46, "m3": 2}


def test_the_replays_are_shared_by_the_permitted_validators_that_aggregate():
    def aggregated(window):
        return Announcement(store_url="file:///v", window=window, aggregate_sha256="12" * 32).encode()

    commitments = {
        "v1": Commitment("v1", aggregated(9), 40),
        "v2": Commitment("v2", aggregated(8), 30),
        "v3": Commitment("v3", aggregated(7), 20),  # silent for three windows: out
        "v4": Commitment("v4", aggregated(10), 45),  # an anchor for a window not yet checked: out
        "copier": Commitment("copier", "hello", 45),
        "m1": Commitment(
            "m1",
            Announcement(store_url="file:///m", window=10, manifest_sha256="34" * 32, segments=1).encode(),
            41,
        ),
    }
    permitted = ["v1", "v2", "v3", "v4", "copier", "v1"]
    assert sharing_validators(permitted, commitments, 10) == ["v1", "v2"]
    assert sharing_validators(["v2", "m1"], commitments, 10) == ["v2"]
    # a permitted hotkey that aggregates but lost its permit takes no share
    assert sharing_validators(["v2"], commitments, 10) == ["v2"]
    # nobody has aggregated yet (a run's first windows): every permitted validator shares
    assert sharing_validators(["copier", "v3"], commitments, 10) == ["copier", "v3"]
    assert sharing_validators([], commitments, 10) == []


# --- through the chains --------------------------------------------------------------------------

CHAIN_HYPERPARAMETERS = replace(
    TEST_HYPERPARAMETERS, max_uids=16, commitment_max_bytes=Hyperparameters().commitment_max_bytes
)
"""room for every neuron below, and the embedded chain's own commitment limit (1,024 bytes) for
the garbage"""
HARNESSES = {"embedded": make_local_harness, "bittensor": make_subtensor_harness}
WINDOWS = WindowConfig(blocks_per_window=40, commit_offset=20, reveal_offset=30, aggregate_offset=35)
GARBAGE = [
    "[" * 1000,
    "{" * 1000,
    '{"s":"file:///g","w":4}',
    f'{{"s":"file:///g","w":0,"m":"{SHA}","n":0}}',
    f'{{"s":"file:///g","w":0,"m":"{SHA}","n":"46"}}',
    '{"store_url":"file:///g"}',
    "null",
    "\u00e9" * 300,
]


@pytest.fixture(params=sorted(HARNESSES))
def harness(request, tmp_path):
    return HARNESSES[request.param](tmp_path, CHAIN_HYPERPARAMETERS)


def test_each_kind_reads_back_from_the_chain(harness):
    published = {
        "store": Announcement(store_url="s3://bucket/validator?endpoint=http://127.0.0.1:9000"),
        "manifest": Announcement(store_url="file:///tmp/é", window=0, manifest_sha256=SHA, segments=46),
        "aggregate": Announcement(store_url="file:///tmp/v", window=0, aggregate_sha256=OTHER_SHA),
    }
    hotkeys = {}
    for kind, announcement in published.items():
        wallet = harness.new_wallet(kind)
        harness.chain.register(wallet)
        harness.chain.commit(wallet, announcement.encode())
        hotkeys[kind] = wallet.hotkey.ss58_address
    harness.advance(1)
    on_chain = harness.chain.commitments()
    assert {kind: Announcement.read(on_chain[hotkey].data) for kind, hotkey in hotkeys.items()} == published


def test_a_garbage_commitment_leaves_out_its_miner_and_fails_no_reader(harness):
    honest = harness.new_wallet("honest")
    harness.chain.register(honest)
    anchor = Announcement(store_url="file:///tmp/honest", window=0, manifest_sha256=SHA, segments=3)
    harness.chain.commit(honest, anchor.encode())
    garbled = []
    for i, data in enumerate(GARBAGE):
        wallet = harness.new_wallet(f"garbled{i}")
        harness.chain.register(wallet)
        harness.chain.commit(wallet, data)
        garbled.append(wallet.hotkey.ss58_address)
    harness.advance(WINDOWS.commit_offset)
    me = honest.hotkey.ss58_address

    in_time, commitments = committed_by_deadline(harness.chain, WINDOWS, 0)
    assert [commitments[hotkey].data for hotkey in garbled] == GARBAGE
    assert in_time == {me: anchor} and claims(in_time) == {me: 3}
    assert sharing_validators([me, *garbled], commitments, 1) == sorted([me, *garbled])
    assert peer_view(harness.chain).announcements == {me: anchor}
