"""The size of a hashed piece (`distrai.train.hashing`), in a module that imports nothing: the run
config checks a codec's chunk against it when it is loaded, before a node imports torch."""

PIECE_ELEMENTS = 1 << 20
"""Elements per hashed piece (4 MiB of fp32). A codec's chunk must divide it, so a piece encodes
on its own exactly as it does inside its tensor."""
