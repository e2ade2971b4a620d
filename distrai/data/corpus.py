"""A built-in offline corpus: templated English-like paragraphs with structure a small model learns.

The text is generated in code from a seed, so it needs no download and every machine builds the
same bytes. Randomness comes from a SplitMix64 generator written here (not Python's `random`,
whose algorithms are not promised stable across versions). The structure is learnable at several
depths: byte and word frequencies first, then subject-verb agreement (singular and plural
forms), counting runs, small sums, the order of weekdays, and questions whose answer repeats a
word from the question.
"""

from __future__ import annotations

from collections.abc import Sequence

MASK64 = (1 << 64) - 1

NAMES = ("ada", "ben", "cleo", "dan", "eve", "finn", "gus", "hana", "ivy", "jon", "kai", "lea", "max", "nia")
NOUNS = (
    ("cat", "cats"),
    ("dog", "dogs"),
    ("fox", "foxes"),
    ("bird", "birds"),
    ("horse", "horses"),
    ("mouse", "mice"),
    ("goat", "goats"),
    ("child", "children"),
    ("farmer", "farmers"),
    ("wolf", "wolves"),
)
ADJECTIVES = ("red", "small", "old", "quick", "quiet", "happy", "tired", "brave", "grey", "young")
VERBS = (
    ("sees", "see"),
    ("chases", "chase"),
    ("likes", "like"),
    ("follows", "follow"),
    ("finds", "find"),
    ("watches", "watch"),
    ("helps", "help"),
)
PLACES = ("the river", "the hill", "the barn", "the garden", "the forest", "the market", "the old bridge")
TIMES = ("in the morning", "at noon", "in the evening", "at night")
DAYS = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
NUMBERS = (
    "zero",
    "one",
    "two",
    "three",
    "four",
    "five",
    "six",
    "seven",
    "eight",
    "nine",
    "ten",
    "eleven",
    "twelve",
    "thirteen",
    "fourteen",
    "fifteen",
    "sixteen",
    "seventeen",
    "eighteen",
    "nineteen",
    "twenty",
)


class SplitMix64:
    """The SplitMix64 generator: 64-bit state, a fixed increment, two multiply-xorshift rounds."""

    def __init__(self, seed: int):
        self._state = seed & MASK64

    def next(self) -> int:
        self._state = (self._state + 0x9E3779B97F4A7C15) & MASK64
        z = self._state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
        return z ^ (z >> 31)

    def below(self, n: int) -> int:
        return self.next() % n

    def pick(self, items: Sequence):
        return items[self.below(len(items))]


def _noun_phrase(rng: SplitMix64) -> tuple[str, bool]:
    singular, plural = rng.pick(NOUNS)
    adjective = rng.pick(ADJECTIVES)
    if rng.below(2):
        return f"{rng.pick(('the', 'a', 'one', 'this'))} {adjective} {singular}", False
    return f"{rng.pick(('the', 'two', 'three', 'some', 'many'))} {adjective} {plural}", True


def _action(rng: SplitMix64) -> str:
    subject, plural = _noun_phrase(rng)
    verb = rng.pick(VERBS)[1 if plural else 0]
    obj, _ = _noun_phrase(rng)
    return f"{subject} {verb} {obj} near {rng.pick(PLACES)} {rng.pick(TIMES)}."


def _counting(rng: SplitMix64) -> str:
    start = rng.below(12)
    length = 3 + rng.below(6)
    run = ", ".join(NUMBERS[start : start + length + 1])
    return f"{rng.pick(NAMES)} counts from {NUMBERS[start]} to {NUMBERS[start + length]}: {run}."


def _sum(rng: SplitMix64) -> str:
    a = rng.below(11)
    b = rng.below(11 - a) if a < 10 else 0
    return f"{NUMBERS[a]} and {NUMBERS[b]} make {NUMBERS[a + b]}."


def _weekday(rng: SplitMix64) -> str:
    day = rng.below(7)
    return f"after {DAYS[day]} comes {DAYS[(day + 1) % 7]}."


def _question(rng: SplitMix64) -> str:
    singular, _ = rng.pick(NOUNS)
    place = rng.pick(PLACES)
    return f"where is the {singular}? The {singular} is at {place}."


def _trip(rng: SplitMix64) -> str:
    name = rng.pick(NAMES)
    found, _ = _noun_phrase(rng)
    return f"on {rng.pick(DAYS)} {name} walks to {rng.pick(PLACES)} and finds {found}."


SENTENCE_KINDS = (_action, _action, _counting, _sum, _weekday, _question, _trip)


def _paragraph(rng: SplitMix64) -> str:
    sentences = [rng.pick(SENTENCE_KINDS)(rng) for _ in range(4 + rng.below(5))]
    return " ".join(sentence[0].upper() + sentence[1:] for sentence in sentences)


def offline_documents(count: int, seed: int = 0) -> list[str]:
    """`count` paragraphs (about 350 bytes each) generated from `seed`; equal inputs, equal text."""
    if count < 1:
        raise ValueError(f"offline corpus needs at least one document, got count={count}")
    rng = SplitMix64(seed)
    return [_paragraph(rng) for _ in range(count)]
