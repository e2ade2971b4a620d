"""`distrai data prepare --run.template T --run.out F` writes the run config that names the data it
prepared: the template's text with its `[data]` table's `source`, `manifest`, `store` and `endpoint`
and the top's `tokenizer` set (`distrai.data.run_text.with_data`, every other line as it was); a
template that cannot take them is refused before any preparing, and nothing is written."""

from __future__ import annotations

import re
import tomllib

import pytest

from distrai.cli import main as distrai_main
from distrai.data.corpus import offline_documents
from distrai.data.run_text import with_data
from distrai.protocol.run import load_run_config, run_id, shipped_config_path

TEMPLATE = """# a run
name = "trial"   # kept
tokenizer = "byte"

[model]
preset = "tiny"

[data]
source = "prepared"   # an old comment
manifest = "{old}"
endpoint = "http://old"
vocab_size = 260

[train]
inner_steps = 30
"""


def test_the_data_lines_replace_the_template_s_and_every_other_line_stays():
    text = with_data(
        TEMPLATE.format(old="1" * 64), {"source": "prepared", "manifest": "2" * 64, "store": "s3://b/d"}
    )
    lines = text.splitlines()
    assert lines[:3] == ["# a run", 'name = "trial"   # kept', 'tokenizer = "data"']
    data = tomllib.loads(text)
    assert data["data"] == {
        "source": "prepared",
        "manifest": "2" * 64,
        "store": "s3://b/d",
        "vocab_size": 260,
    }
    assert data["train"] == {"inner_steps": 30} and data["model"] == {"preset": "tiny"}
    assert "old comment" not in text and "http://old" not in text
    # a template without a tokenizer line gets one at its top; an endpoint is set where given
    bare = with_data("[data]\nvocab_size = 1\n", {"store": "s3://b", "endpoint": "http://e"})
    assert tomllib.loads(bare) == {
        "tokenizer": "data",
        "data": {"store": "s3://b", "endpoint": "http://e", "vocab_size": 1},
    }


@pytest.mark.parametrize(
    ("template", "data", "message"),
    [
        ("[model]\npreset = 'tiny'\n", {"store": "s"}, "exactly one \\[data\\] table, it has 0"),
        ("[data]\n[data]\n", {"store": "s"}, "exactly one \\[data\\] table, it has 2"),
        ("[data]\n", {"vocab_size": "3"}, "not a key that names prepared data: vocab_size"),
    ],
)
def test_a_template_that_cannot_take_the_lines_is_refused_by_name(template, data, message):
    with pytest.raises(ValueError, match=message):
        with_data(template, data)


def prepare(tmp_path, *extra: str) -> int:
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("".join(f'{{"text": "{t[:200]}"}}\n' for t in offline_documents(40)).replace("\\", ""))
    argv = ["data", "prepare", "--files", str(corpus), "--tokenizer", "byte", "--shard-tokens", "2048"]
    argv += ["--heldout-fraction", "0.1", "--store.url", f"file://{tmp_path / 'store'}", *extra]
    return distrai_main(argv)


def test_the_command_writes_the_run_config_naming_what_it_prepared(tmp_path, capsys):
    out = tmp_path / "RUN.toml"
    template = shipped_config_path("cpu-localnet")
    assert prepare(tmp_path, "--run.template", str(template), "--run.out", str(out)) == 0
    printed = capsys.readouterr().out
    digest = printed.strip().splitlines()[-1]
    config = load_run_config(out)
    assert config.data.manifest == digest and config.data.store == f"file://{tmp_path / 'store'}"
    said = " ".join(printed.split())  # the console wraps long lines
    assert f"run id {run_id(config)}" in said and "distrai run publish --run.config" in said
    shipped = load_run_config(template)
    assert config.train == shipped.train and config.windows == shipped.windows


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--run.out", "RUN.toml"], "--run.template and --run.out go together"),
        (["--run.template", "missing.toml", "--run.out", "RUN.toml"], "missing.toml: cannot read"),
        (["--run.template", "BAD", "--run.out", "RUN.toml"], "exactly one \\[data\\] table"),
        (["--run.template", "EXTRA", "--run.out", "RUN.toml"], "EXTRA.toml: .*builtin_documents"),
    ],
)
def test_a_bad_template_is_refused_before_the_work_and_nothing_is_written(tmp_path, capsys, flags, message):
    (tmp_path / "BAD.toml").write_text("[model]\npreset = 'tiny'\n")
    shipped = shipped_config_path("cpu-localnet").read_text()
    (tmp_path / "EXTRA.toml").write_text(shipped.replace("[data]\n", "[data]\nbuiltin_documents = 5\n"))
    flags = [str(tmp_path / f"{f}.toml") if f in ("BAD", "EXTRA") else f for f in flags]
    flags = [str(tmp_path / f) if f == "RUN.toml" else f for f in flags]
    assert prepare(tmp_path, *flags) == 1
    err = capsys.readouterr()
    assert re.search(message, err.out + err.err), err
    assert not (tmp_path / "RUN.toml").exists() and not (tmp_path / "store").exists()
