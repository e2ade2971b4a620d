"""A runtime of a run config whose prepared data is the local network's built-in corpus (the shipped
`cpu-localnet.toml`): the data is prepared into a store in `folder`, then read from it as a node does."""

from __future__ import annotations

from pathlib import Path

from distrai.data.access import DataAccess
from distrai.localnet import publish_builtin_data
from distrai.run import RunConfig
from distrai.runtime import Runtime, build_runtime
from distrai.store import open_store


def localnet_runtime(config: RunConfig, folder: Path) -> Runtime:
    store_url = f"file://{folder / 'store'}"
    publish_builtin_data(config, store_url)
    return build_runtime(config, data_access=DataAccess(open_store(store_url), folder / "cache"))
