"""The byte-level tokenizer: ids are the UTF-8 bytes, decoding inverts encoding, and it survives
save_pretrained / AutoTokenizer.from_pretrained."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from transformers import AutoTokenizer

from distrai.data.byte_tokenizer import BYTE_VOCAB_SIZE, SPECIAL_TOKENS, byte_tokenizer

TOKENIZER = byte_tokenizer()


@settings(max_examples=60, deadline=None)
@given(st.text(max_size=200))
def test_ids_are_utf8_bytes_and_decode_inverts(text):
    ids = TOKENIZER(text, add_special_tokens=False)["input_ids"]
    assert ids == list(text.encode("utf-8"))
    assert TOKENIZER.decode(ids) == text


def test_vocabulary_is_bytes_then_distinct_specials():
    assert len(TOKENIZER) == BYTE_VOCAB_SIZE == 260
    special_ids = [TOKENIZER.convert_tokens_to_ids(token) for token in SPECIAL_TOKENS]
    assert special_ids == [256, 257, 258, 259]
    named = [TOKENIZER.bos_token_id, TOKENIZER.eos_token_id, TOKENIZER.pad_token_id, TOKENIZER.unk_token_id]
    assert named == special_ids
    assert TOKENIZER.decode([104, 105, 257], skip_special_tokens=True) == "hi"


def test_special_token_text_is_one_token():
    ids = TOKENIZER("a<|eos|>b", add_special_tokens=False)["input_ids"]
    assert ids == [97, 257, 98]


def test_save_pretrained_round_trip(tmp_path):
    TOKENIZER.save_pretrained(tmp_path)
    loaded = AutoTokenizer.from_pretrained(tmp_path)
    sample = "Grüße, 世界! \n\ttabs and 😀"
    assert loaded(sample, add_special_tokens=False)["input_ids"] == list(sample.encode("utf-8"))
    assert loaded.decode(list(sample.encode("utf-8"))) == sample
    assert len(loaded) == BYTE_VOCAB_SIZE
    assert loaded.eos_token_id == TOKENIZER.eos_token_id
    assert loaded.pad_token_id == TOKENIZER.pad_token_id
