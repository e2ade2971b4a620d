"""A validator checks every update blob without decoding it (`check_update`) and decodes only the
updates it uses (`MinerVerdict.update`): every malformed blob is refused with the same error as
decoding refuses it, an update nobody uses is never decoded, and the duplicate check flags the same
updates from payloads as from decoded updates, with 1 thread or 4."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from test_codec_fuzz import SHAPES as FUZZ_SHAPES
from test_codec_fuzz import mutated_payloads
from test_validator_checks import MINER, check, manifest_body, publish

from distrai.codec import CodecError, get_codec, pack_bits, unpack_bits
from distrai.codec.int8 import QuantizedEntries
from distrai.codec.plain import PlainEntries
from distrai.codec.topk import KeptEntries
from distrai.localnet.network import local_runtime
from distrai.protocol.globalmodel import GlobalModel
from distrai.protocol.run import load_run_config, shipped_config_path
from distrai.protocol.update import check_update, decode_update, encode_update
from distrai.store import FileStore
from distrai.train.outer import OuterState
from distrai.wire import WireError, sign_document
from distrai.wire.verdicts import PASS, Check, Number
from validators.checks import MinerVerdict
from validators.duplicates import flag_duplicates

HOTKEY, WINDOW = "5Miner" + "m" * 42, 3
SHAPES = {"w": (40, 12), "b": (9,)}
CODECS = {"none": {}, "int8": {"chunk": 16}, "topk": {"chunk": 16, "k": 4}}


def random_delta(seed: int, shapes=SHAPES) -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    return {name: torch.randn(shape, generator=generator) for name, shape in shapes.items()}


def same_outcome(codec, blob: bytes, shapes) -> None:
    """`check_update` accepts the blob when `decode_update` does, and refuses it with the same error
    (type, reason and words) when it does not."""
    try:
        decode_update(blob, codec, shapes, 1 << 20, HOTKEY, WINDOW)
    except (WireError, CodecError) as decoding:
        with pytest.raises(type(decoding)) as checking:
            check_update(blob, codec, shapes, 1 << 20, HOTKEY, WINDOW)
        assert (checking.value.reason, str(checking.value)) == (decoding.reason, str(decoding))
        return
    check_update(blob, codec, shapes, 1 << 20, HOTKEY, WINDOW)


def blob_of(payload, metadata, hotkey=HOTKEY, window=WINDOW) -> bytes:
    return encode_update(payload, metadata, hotkey, window)


def malformed(case: str) -> tuple[str, bytes]:
    """(codec name, blob) of one refusal."""
    name = {
        "bad_option": "topk",
        "wrong_codec": "int8",
        "bad_version": "none",
        "unknown_field": "topk",
        "missing_field": "int8",
        "bad_dtype": "none",
        "bad_size": "int8",
        "bad_count": "topk",
        "bad_padding": "topk",
        "index_out_of_range": "topk",
        "bad_index_order": "topk",
        "value_out_of_range": "int8",
        "non_finite": "none",
        "bad_scale": "topk",
        "wrong_owner": "topk",
        "malformed_safetensors": "int8",
        "too_large": "none",
    }[case]
    payload, metadata, _ = get_codec(name, **CODECS[name]).encode(random_delta(0))
    hotkey, window = HOTKEY, WINDOW
    if case == "bad_option":
        metadata["k"] = "5"
    elif case == "wrong_codec":
        metadata["codec"] = "none"
    elif case == "bad_version":
        metadata["codec_version"] = "2"
    elif case == "unknown_field":
        payload["w:extra"] = torch.zeros(3)
    elif case == "missing_field":
        del payload["b:scales"]
    elif case == "bad_dtype":
        payload["w:values"] = payload["w:values"].to(torch.float16)
    elif case == "bad_size":
        payload["w:values"] = payload["w:values"][:-1]
    elif case == "bad_count":
        payload["w:indices"] = torch.cat([payload["w:indices"], torch.zeros(1, dtype=torch.uint8)])
    elif case == "bad_padding":
        payload["b:values"][-1] |= 0b1000_0000  # 3 entries of 2 bits leave the top 2 bits of the byte
    elif case == "index_out_of_range":
        indices = unpack_bits(payload["b:indices"], 4, 3)  # one chunk of 9 keeps ceil(4·9/16) = 3
        indices[2] = 12  # fits in 4 bits and in a full chunk, not in the 9 of "b"
        payload["b:indices"] = pack_bits(indices, 4)
    elif case == "bad_index_order":
        indices = unpack_bits(payload["w:indices"], 4, 120)  # 30 chunks of 16 keep 4 each
        indices[1] = indices[0]
        payload["w:indices"] = pack_bits(indices, 4)
    elif case == "value_out_of_range":
        payload["b:values"][3] = -128
    elif case == "non_finite":
        payload["b:values"][0] = float("nan")
    elif case == "bad_scale":
        payload["w:levels"][0], payload["w:levels"][1] = 2.0, 1.0
    elif case == "wrong_owner":
        window = WINDOW - 1
    elif case == "malformed_safetensors":
        return name, b"\x10\x00\x00\x00\x00\x00\x00\x00not a header at all"
    elif case == "too_large":
        return name, blob_of(payload, metadata) + b" " * (1 << 20)
    return name, blob_of(payload, metadata, hotkey, window)


REFUSALS = [
    "bad_option",
    "wrong_codec",
    "bad_version",
    "unknown_field",
    "missing_field",
    "bad_dtype",
    "bad_size",
    "bad_count",
    "bad_padding",
    "index_out_of_range",
    "bad_index_order",
    "value_out_of_range",
    "non_finite",
    "bad_scale",
    "wrong_owner",
    "malformed_safetensors",
    "too_large",
]


@pytest.mark.parametrize("case", REFUSALS)
def test_every_refusal_of_decoding_is_made_without_decoding(case):
    name, blob = malformed(case)
    codec = get_codec(name, **CODECS[name])
    with pytest.raises((WireError, CodecError)) as caught:
        check_update(blob, codec, SHAPES, 1 << 20, HOTKEY, WINDOW)
    assert caught.value.reason == case, caught.value
    same_outcome(codec, blob, SHAPES)


@settings(max_examples=200, deadline=None)
@given(mutated_payloads())
def test_mutated_blobs_are_refused_as_decoding_refuses_them(case):
    codec, payload, metadata = case
    same_outcome(codec, blob_of(payload, metadata), FUZZ_SHAPES)


# --- decoding only what is used -----------------------------------------------------------------


@pytest.fixture
def count_decodes(monkeypatch):
    """Call to count the codecs' dense decodings from then on (one entry a parameter decoded)."""

    def start() -> list[str]:
        seen: list[str] = []
        for cls in (PlainEntries, QuantizedEntries, KeptEntries):

            def counting(self, dense=cls.dense, kind=cls.__name__):
                seen.append(kind)
                return dense(self)

            monkeypatch.setattr(cls, "dense", counting)
        return seen

    return start


def checked_verdict(codec, delta, hotkey: str, uid: int) -> MinerVerdict:
    payload, metadata, _ = codec.encode(delta)
    blob = blob_of(payload, metadata, hotkey)
    verdict = MinerVerdict(hotkey, uid, {Check.MANIFEST: PASS, Check.CONSISTENCY: PASS, Check.UPDATE: PASS})
    verdict.checked, verdict.blob = check_update(blob, codec, SHAPES, len(blob), hotkey, WINDOW), blob
    return verdict


@pytest.mark.parametrize("name", sorted(CODECS))
def test_an_update_nobody_uses_is_never_decoded(name, count_decodes):
    codec = get_codec(name, **CODECS[name])
    verdicts = [checked_verdict(codec, random_delta(seed), f"5Hotkey{seed}", seed) for seed in range(3)]
    decodes = count_decodes()
    assert all(v.has_update for v in verdicts)
    flag_duplicates(verdicts, {v.hotkey: 1 for v in verdicts}, 0.95, "run/duplicates", workers=2)
    assert all(v.passed and Number.MAX_COSINE in v.numbers for v in verdicts)
    assert decodes == []
    used = verdicts[1]
    update = used.update
    assert len(decodes) == len(SHAPES)
    assert used.update is update and len(decodes) == len(SHAPES)  # decoded once, then kept
    expected = decode_update(used.blob, codec, SHAPES, len(used.blob), used.hotkey, WINDOW)
    assert update.keys() == expected.keys()
    assert all(torch.equal(update[n], expected[n]) for n in SHAPES)
    assert verdicts[0].decoded is None and verdicts[2].decoded is None


def test_an_update_set_by_hand_is_the_verdict_s_update():
    verdict = checked_verdict(get_codec("topk", **CODECS["topk"]), random_delta(0), HOTKEY, 0)
    replacement = random_delta(1)
    verdict.update = replacement
    assert verdict.update is replacement and verdict.checked is None and verdict.has_update
    verdict.update = None
    assert not verdict.has_update


# --- the checks of a published update -----------------------------------------------------------


@pytest.fixture(scope="module")
def runtime(tmp_path_factory):
    return local_runtime(
        load_run_config(shipped_config_path("cpu-localnet")), tmp_path_factory.mktemp("data")
    )


@pytest.fixture(scope="module")
def model(runtime):
    return GlobalModel(WINDOW, runtime.initial_params(), OuterState(momentum={}))


def published_check(runtime, model, tmp_path, payload, metadata) -> MinerVerdict:
    """`check_miner` of MINER's honest manifest naming the blob of `payload` as its update."""
    store, hotkey = FileStore(tmp_path), MINER.ss58_address
    blob = blob_of(payload, metadata, hotkey)
    manifest = sign_document(MINER, manifest_body(runtime, model, blob, metadata, hotkey))
    return check(runtime, model, store, publish(store, runtime, hotkey, manifest, blob))


def miner_payload(runtime, model):
    shapes = {n: tuple(p.shape) for n, p in model.params.items()}
    payload, metadata, _ = runtime.codec.encode({n: 1e-3 * d for n, d in random_delta(0, shapes).items()})
    return shapes, payload, metadata


def test_a_passed_update_is_checked_and_kept_undecoded(runtime, model, tmp_path, count_decodes):
    shapes, payload, metadata = miner_payload(runtime, model)
    decodes = count_decodes()
    verdict = published_check(runtime, model, tmp_path, payload, metadata)
    assert verdict.passed, verdict.verdicts
    assert verdict.checked is not None and verdict.checked.blob is verdict.blob
    assert decodes == [] and verdict.decoded is None
    assert set(verdict.update) == set(model.params) and len(decodes) == len(shapes)


def test_a_malformed_update_is_refused_by_the_check_with_its_reason(runtime, model, tmp_path):
    _, payload, metadata = miner_payload(runtime, model)
    name = list(model.params)[-1]
    payload[f"{name}:indices"][:] = 0  # every kept index of the parameter is 0: repeated within a chunk
    verdict = published_check(runtime, model, tmp_path, payload, metadata)
    assert not verdict.passed and verdict.fraud
    assert verdict.verdicts[Check.UPDATE].startswith("bad_index_order:"), verdict.verdicts
    assert not verdict.has_update


# --- duplicates from payloads -------------------------------------------------------------------


def duplicate_window(codec, dense: bool) -> list[MinerVerdict]:
    """Three independent updates, a copy of the first, the second rescaled and the third perturbed;
    the first's mark stands out, the others' do not. `dense`: the verdicts hold decoded updates, as
    the duplicate check read them before payload sketches."""
    deltas = [random_delta(seed) for seed in range(3)]
    generator = torch.Generator().manual_seed(9)
    deltas += [
        deltas[0],
        {n: 3.0 * t for n, t in deltas[1].items()},
        {n: t + 0.01 * torch.randn(t.shape, generator=generator) for n, t in deltas[2].items()},
    ]
    marks = [(0.030, 0.005), (0.012, 0.005), (0.011, 0.005), (0.010, 0.005), (0.013, 0.005), (0.010, 0.005)]
    verdicts = []
    for uid, (delta, (mark, error)) in enumerate(zip(deltas, marks, strict=True)):
        verdict = checked_verdict(codec, delta, f"5Hotkey{uid}", uid)
        if dense:
            verdict.update = verdict.update
        verdict.numbers.update({Number.MARK: mark, Number.MARK_Z: mark / error})
        verdicts.append(verdict)
    return verdicts


@pytest.mark.parametrize("name", sorted(CODECS))
def test_duplicates_are_flagged_as_from_decoded_updates_with_1_or_4_threads(name):
    codec = get_codec(name, **CODECS[name])
    outcomes = []
    for dense, workers in ((True, 1), (False, 1), (False, 4)):
        verdicts = duplicate_window(codec, dense)
        assert all((v.checked is None) == dense for v in verdicts)
        flag_duplicates(verdicts, {v.hotkey: 10 for v in verdicts}, 0.95, "run/duplicates", workers=workers)
        outcomes.append([(v.verdicts, v.numbers[Number.MAX_COSINE], v.fraud) for v in verdicts])
    assert outcomes[1] == outcomes[0] and outcomes[2] == outcomes[0]
    failed = [uid for uid, (verdicts, _, _) in enumerate(outcomes[0]) if Check.DUPLICATE in verdicts]
    assert failed == [1, 2, 3, 4, 5], outcomes[0]
