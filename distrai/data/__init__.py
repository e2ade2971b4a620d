"""Prepared token data: `distrai data prepare` writes token shards and their manifest to a store;
nodes read the manifest the run config names, and only the shards they use, each checked against
its hash, cached on disk and memory-mapped."""
