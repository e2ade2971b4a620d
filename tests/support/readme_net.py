"""The README's walk on the embedded chain, run once per test session while other tests do
(`support.background`); tests/test_readme_walk.py reads it.

The commands are the lines of the README's fenced blocks marked `<!-- readme-walk -->`, run as they
are written from the repository's root, with the README's placeholders given values: `dev.db`,
`RUN.toml` and `corpus.jsonl` become files in the network's folder, BUCKET a bucket of a moto S3
server the network starts and URL that server's address. They run in the user's environment the
README assumes: this Python's environment first on PATH (`distrai`, `python`), a home folder of
their own (the wallets and the nodes' work folders), the S3 credentials in the AWS variables.

Each command runs to its end in turn (a few seconds each), except the nodes (`python neurons/…`),
which start last and run their windows while the session goes on; the walk itself runs in a thread,
so that a background lane never waits for it. Once `distrai data prepare` has
run (and written RUN.toml: the shipped CPU run config naming the data it prepared), the network lowers
its steps a window to `INNER_STEPS`, as the README says a trial may."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import boto3

from distrai.data.corpus import offline_documents
from distrai.localnet.network import Neuron
from support.s3server import FAKE_ACCESS_KEY_ID, FAKE_SECRET_ACCESS_KEY, start_server, stop_server
from support.tiny_models import write_corpus_files

REPO = Path(__file__).resolve().parents[2]
README = REPO / "README.md"
MARKER = "<!-- readme-walk -->"
BUCKET = "readme-walk"
INNER_STEPS = 30
"""The most a window trains (the shipped config's 90, lowered as the README allows for a lighter trial)."""
COMMAND_TIMEOUT_S = 300.0


def walk_lines(readme: str) -> list[str]:
    """The README's walk: the lines of each fenced block right after a `MARKER` line, a line ending in
    a backslash joined with the next."""
    blocks = re.findall(rf"^{re.escape(MARKER)}\n```[a-z]*\n(.*?)^```$", readme, re.MULTILINE | re.DOTALL)
    return [line for block in blocks for line in block.replace("\\\n", " ").splitlines() if line.strip()]


def commands(line: str) -> list[list[str]]:
    """The argument vectors of a walk's line: its commands, joined by `&&`."""
    argvs: list[list[str]] = [[]]
    for word in shlex.split(line):
        if word == "&&":
            argvs.append([])
        else:
            argvs[-1].append(word)
    return argvs


@dataclass(frozen=True)
class Ran:
    """A command of the walk that ran to its end."""

    argv: list[str]
    returncode: int
    output: str


class ReadmeNet:
    """The walk in folder `work`: its S3 server, the commands that ran to their end (`ran`), the
    nodes it started (`nodes`) and what stopped it if it could not go on (`error`). It runs while its
    walk (`running`) or any of its nodes does (`neurons`)."""

    def __init__(self, work: Path, env: Mapping[str, str]):
        self.work = work
        self.home = work / "home"
        self.chain_path = work / "dev.db"
        self.run_config = work / "run.toml"
        self.corpus = write_corpus_files(work / "text", offline_documents(1000, seed=5))["json"]
        self.ran: list[Ran] = []
        self.nodes: list[Neuron] = []
        self.error: BaseException | None = None
        self._walking = threading.Thread(target=self._walk_readme, name="README walk", daemon=True)
        self.home.mkdir(parents=True)
        self.endpoint, self._server = start_server(work / "s3server.log")
        self.env = {
            **env,
            "HOME": str(self.home),
            "PATH": os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")]),
            "AWS_ACCESS_KEY_ID": FAKE_ACCESS_KEY_ID,
            "AWS_SECRET_ACCESS_KEY": FAKE_SECRET_ACCESS_KEY,
            "PYTHONUNBUFFERED": "1",
            "OMP_NUM_THREADS": "1",
            "MKL_NUM_THREADS": "1",
            "HF_HUB_OFFLINE": "1",
            "COLUMNS": "160",
        }

    @property
    def neurons(self) -> list:
        return [self, *self.nodes]

    def running(self) -> bool:
        return self._walking.is_alive()

    def start(self) -> ReadmeNet:
        self._walking.start()
        return self

    def _walk_readme(self) -> None:
        try:
            self.make_bucket()
            self.walk(walk_lines(README.read_text()))
        except BaseException as exc:
            self.error = exc

    def make_bucket(self) -> None:
        boto3.client(
            "s3",
            endpoint_url=self.endpoint,
            aws_access_key_id=FAKE_ACCESS_KEY_ID,
            aws_secret_access_key=FAKE_SECRET_ACCESS_KEY,
            region_name="us-east-1",
        ).create_bucket(Bucket=BUCKET)

    def placed(self, word: str) -> str:
        """`word` with the README's placeholders given this network's values."""
        values = {
            "dev.db": str(self.chain_path),
            "RUN.toml": str(self.run_config),
            "corpus.jsonl": str(self.corpus),
            "BUCKET": BUCKET,
            "URL": self.endpoint,
        }
        names = "|".join(re.escape(name) for name in values)
        return re.sub(rf"(?<![\w.])({names})(?![\w.])", lambda m: values[m.group(1)], word)

    def walk(self, lines: list[str]) -> None:
        """Run each line's commands in turn and start the nodes; stop at the first command that fails
        (its exit code and output are in `ran`)."""
        for line in lines:
            for words in commands(line):
                argv = [self.placed(word) for word in words]
                if argv[0] == "python":
                    self.start_node(argv[1:])
                    continue
                out = subprocess.run(
                    argv,
                    cwd=REPO,
                    env=self.env,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.STDOUT,
                    text=True,
                    timeout=COMMAND_TIMEOUT_S,
                )
                self.ran.append(Ran(argv, out.returncode, out.stdout))
                if out.returncode != 0:
                    return
                if argv[1:3] == ["data", "prepare"]:
                    self.lighten_run_config()

    def lighten_run_config(self) -> None:
        """RUN.toml as `distrai data prepare --run.out` wrote it, with `INNER_STEPS` steps a window (the
        README's "a lower inner_steps makes the trial lighter")."""
        written = self.run_config.read_text()
        steps = re.search(r"^inner_steps = 90 ", written, re.MULTILINE).group(0)
        self.run_config.write_text(written.replace(steps, f"inner_steps = {INNER_STEPS} "))

    def start_node(self, args: list[str]) -> None:
        """Start `python ARGS` (`python` is this interpreter, the environment's) without waiting; the
        node is named by its wallet."""
        wallet = args[args.index("--wallet.name") + 1]
        work_dir = self.home / ".distrai" / f"{wallet}-default"
        node = Neuron(wallet, Path(args[0]).stem, wallet, work_dir, self.work / f"{wallet}.log", args)
        node.start(self.env)
        self.nodes.append(node)

    def stop(self) -> None:
        self._walking.join(timeout=COMMAND_TIMEOUT_S)
        for node in self.nodes:
            node.stop()
        stop_server(self._server)


def start_readme_net(work: Path, env: Mapping[str, str]) -> ReadmeNet:
    work.mkdir(parents=True)
    return ReadmeNet(work, env).start()
