"""A word-level tokenizer of a given size: it sizes a model as a run's tokenizer would (50,257 for
the GPU config's GPT-2 BPE) where the benchmark's batches are random ids. Needs only `tokenizers`
and `transformers`, which a GPU machine's image has, not the node's other dependencies."""

from __future__ import annotations

from tokenizers import Tokenizer
from tokenizers.models import WordLevel
from transformers import PreTrainedTokenizerFast


def word_tokenizer(size: int) -> PreTrainedTokenizerFast:
    """Tokens "<pad>", "<s>", "</s>" and "t3" … "t{size - 1}"."""
    words = {"<pad>": 0, "<s>": 1, "</s>": 2} | {f"t{i}": i for i in range(3, size)}
    return PreTrainedTokenizerFast(
        tokenizer_object=Tokenizer(WordLevel(words, unk_token="<pad>")),
        pad_token="<pad>",
        bos_token="<s>",
        eos_token="</s>",
    )
