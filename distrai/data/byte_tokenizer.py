"""A byte-level tokenizer that needs nothing downloaded.

Token id = byte value for the 256 bytes of the UTF-8 encoding, then four special tokens. It is a
real `transformers` fast tokenizer (a `tokenizers` BPE model with no merges behind ByteLevel
pre-tokenizer and decoder), so `save_pretrained` / `AutoTokenizer.from_pretrained` work on it
exactly as on a hub model's tokenizer.
"""

from __future__ import annotations

from tokenizers import Tokenizer, decoders, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

BOS = "<|bos|>"
EOS = "<|eos|>"
PAD = "<|pad|>"
UNK = "<|unk|>"
SPECIAL_TOKENS = (BOS, EOS, PAD, UNK)
BYTE_VOCAB_SIZE = 256 + len(SPECIAL_TOKENS)


def byte_to_symbol() -> dict[int, str]:
    """The ByteLevel alphabet: printable bytes stand for themselves, the rest shift above U+0100."""
    printable = [
        *range(ord("!"), ord("~") + 1),
        *range(ord("¡"), ord("¬") + 1),
        *range(ord("®"), ord("ÿ") + 1),
    ]
    printable_set = set(printable)
    symbols: dict[int, str] = {}
    shifted = 0
    for byte in range(256):
        if byte in printable_set:
            symbols[byte] = chr(byte)
        else:
            symbols[byte] = chr(256 + shifted)
            shifted += 1
    return symbols


def byte_tokenizer() -> PreTrainedTokenizerFast:
    """Build the byte-level tokenizer: ids 0..255 are bytes, 256.. are BOS, EOS, PAD, UNK."""
    vocab = {symbol: byte for byte, symbol in byte_to_symbol().items()}
    backend = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    backend.decoder = decoders.ByteLevel()
    backend.add_special_tokens(list(SPECIAL_TOKENS))
    return PreTrainedTokenizerFast(
        tokenizer_object=backend, bos_token=BOS, eos_token=EOS, pad_token=PAD, unk_token=UNK
    )
