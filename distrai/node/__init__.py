"""Assembling a node, miner or validator: its flags, wallet, chain, store and data (`build`), its
registration, its link check, its place in the window (`participant`), its metrics and its stop
on signals (docs/architecture.md)."""
