"""A local network whose store is an S3 bucket (`LocalnetOptions.store_url`, as bench/chaos.py's
`s3` outage runs it): set up on a real moto server, no node started. Every honest node publishes to
the bucket and the network prepares the run's data there; adversaries keep file stores of their own
and read the data from the bucket; the nodes get the credentials in the AWS variables. Without the
option, the network keeps its file store."""

from __future__ import annotations

from distrai.localnet.network import Localnet, LocalnetOptions
from distrai.protocol.run import load_run_config, shipped_config_path
from distrai.store import S3Store, blob_key, open_store

pytest_plugins = ["tests.support.s3server"]


def flag(args: list[str], name: str) -> str:
    return args[args.index(name) + 1]


def test_every_honest_node_publishes_to_the_bucket_the_network_put_the_data_in(
    tmp_path, s3_endpoint, s3_bucket, s3_credentials
):
    url = f"s3://{s3_bucket}/net?endpoint={s3_endpoint}&path_style=true"
    keys = (s3_credentials["access_key_id"], s3_credentials["secret_access_key"])
    net = Localnet(
        LocalnetOptions(
            work=tmp_path / "net",
            miners=2,
            validators=1,
            adversaries=("lazy",),
            store_url=url,
            store_credentials=keys,
        )
    )
    net.setup()

    honest = [n for n in net.neurons if not n.name.startswith("adversary-")]
    assert [n.name for n in honest] == ["validator0", "miner0", "miner1"]
    assert all(flag(n.args, "--store.url") == url for n in honest)
    adversary = net.neuron("adversary-lazy").args
    assert flag(adversary, "--store.url") == f"file://{net.work / 'stores' / 'lazy'}"
    assert flag(adversary, "--data.store") == url
    env = net.env({})
    assert (env["AWS_ACCESS_KEY_ID"], env["AWS_SECRET_ACCESS_KEY"]) == keys

    manifest = load_run_config(shipped_config_path("cpu-localnet")).data.manifest
    store = open_store(url, **s3_credentials)
    assert isinstance(store, S3Store) and store.exists(blob_key(manifest))
    assert not (net.work / "store").exists(), "nothing went to a file store"


def test_without_a_store_url_the_network_keeps_its_file_store(tmp_path):
    net = Localnet(LocalnetOptions(work=tmp_path / "net"))
    assert net.store_url == f"file://{net.work / 'store'}"
    assert "AWS_ACCESS_KEY_ID" not in net.env({})
