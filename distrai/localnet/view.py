"""What `distrai localnet` shows: a live table while the network runs, and the results at the end."""

from __future__ import annotations

from dataclasses import dataclass
from statistics import mean

from rich.table import Table

from distrai.chain.base import Metagraph
from distrai.localnet.network import Localnet
from distrai.localnet.report import (
    REPORT,
    RunSummary,
    node_metrics,
    read_summary,
    report_markdown,
    write_summary,
)
from distrai.node.metrics import node_records, read_metrics, utilization
from distrai.node.metrics_records import RevealRecord, TrainRecord, ValidatorWindowRecord
from distrai.node.wallets import open_wallet
from distrai.protocol.heldout import HeldoutCurve
from distrai.protocol.layout import report_key
from distrai.protocol.run import run_id
from distrai.protocol.runtime import Runtime, build_runtime
from distrai.protocol.sync import StoreCache
from distrai.protocol.windows import activities, aggregate_deadline
from distrai.store import StoreError
from distrai.train.model import count_parameters
from distrai.train.replay_class import device_name
from distrai.wire import WireError, open_document
from distrai.wire.window_documents import WindowReport, parse_body


def live_table(net: Localnet) -> Table:
    chain = net.chain
    assert chain is not None, "the localnet made or opened its chain"
    block = chain.block()
    cfg = net.config.windows
    mg = chain.metagraph()
    under_way = ", ".join(f"window {w} {p.name.lower()}" for w, p in activities(cfg, block))
    table = Table(title=f"DisTrAI localnet — block {block}: {under_way}")
    for col in ("neuron", "uid", "process", "last window", "utilization", "latest"):
        table.add_column(col)
    for neuron in net.neurons:
        records = node_records(neuron.work_dir / "metrics.jsonl")
        windows = [r for r in records if isinstance(r.record, TrainRecord | ValidatorWindowRecord)]
        last = windows[-1] if windows else None
        uid = mg.uid_of(_hotkey(net, neuron.name))
        if last and isinstance(last.record, TrainRecord):
            trained = last.record
            latest = f"loss {_loss(trained.loss_first)} → {_loss(trained.loss_last)}, {trained.tokens_per_s:.0f} tok/s"
            reveals = [r.record for r in records if isinstance(r.record, RevealRecord)]
            if reveals:
                latest += f"; reveal {reveals[-1].upload_seconds:.1f} s"
                latest += " (late)" if reveals[-1].reveal_late else ""
            if trained.behaviour != "honest":
                latest = f"adversary {trained.behaviour}; {latest}"
        elif last and isinstance(last.record, ValidatorWindowRecord):
            latest = f"{last.record.accepted}/{last.record.updates} updates accepted"
        else:
            latest = "starting"
        state = (
            "running"
            if neuron.running()
            else f"exited ({neuron.process.returncode})"
            if neuron.process
            else "—"
        )
        share = utilization(records)
        table.add_row(
            neuron.name,
            str(uid),
            state,
            str(last.window) if last else "—",
            "—" if share is None else f"{share:.0%}",
            latest,
        )
    return table


def _loss(value: float | None) -> str:
    return "—" if value is None else f"{value:.3f}"


def _hotkey(net: Localnet, name: str) -> str:
    return open_wallet(name, "default", str(net.wallet_path)).hotkey.ss58_address


@dataclass(frozen=True)
class MinerResult:
    name: str
    uid: int
    windows_accepted: int
    mean_score: float
    weight: float
    incentive: float
    emission: float
    utilization: float | None
    """train seconds over wall seconds, from the miner's own metrics"""
    late_reveals: int
    last_rejection: str
    """the leader's latest reason for rejecting this miner, or "" """


def miner_results(net: Localnet, windows: list[int], mg: Metagraph) -> list[MinerResult]:
    """Per miner, from the signed reports of the honest validator with the most stake (the first
    after the `--leader-adversary` ones) and the chain; standing and earnings from `mg`, read when
    the network stopped (the chain goes on paying on the last weights)."""
    chain = net.chain
    assert chain is not None, "the localnet made or opened its chain"
    leader = _hotkey(net, f"validator{len(net.options.leader_adversaries)}")
    reports = [r.miners for r in signed_reports(net, windows) if r.validator == leader]
    leader_uid = mg.uid_of(leader)
    weights = chain.weights().get(leader_uid, {}) if leader_uid is not None else {}
    results = []
    for neuron in net.neurons:
        if neuron.role != "miner":
            continue
        hotkey = _hotkey(net, neuron.name)
        uid = mg.uid_of(hotkey)
        assert uid is not None, "the localnet registered every miner"
        scores = [r[hotkey].score for r in reports if hotkey in r]
        reasons = [reason for r in reports if hotkey in r and (reason := r[hotkey].reason)]
        n = mg.neurons[uid]
        records = node_records(neuron.work_dir / "metrics.jsonl")
        results.append(
            MinerResult(
                name=neuron.name,
                uid=uid,
                windows_accepted=sum(1 for s in scores if s > 0),
                mean_score=mean(scores) if scores else 0.0,
                weight=weights.get(uid, 0.0),
                incentive=n.incentive,
                emission=n.total_emission,
                utilization=utilization(records),
                late_reveals=sum(
                    1 for r in records if isinstance(r.record, RevealRecord) and r.record.reveal_late
                ),
                last_rejection=reasons[-1] if reasons else "",
            )
        )
    return results


def results_table(results: list[MinerResult], block: int, note: str = "") -> Table:
    """The miners' results as of `block`, with `note` (`accepted_note`) under them."""
    table = Table(title="miners", caption=note or None, caption_justify="left")
    table.add_column("miner", no_wrap=True)
    for col in (
        "uid",
        "windows accepted",
        "mean score (tokens)",
        "weight",
        "incentive",
        f"earned (block {block})",
        "utilization",
        "late reveals",
    ):
        table.add_column(col, justify="right")
    rejections = any(r.last_rejection for r in results)
    if rejections:
        table.add_column("last rejection", no_wrap=True, overflow="ellipsis", max_width=32)
    for r in results:
        table.add_row(
            r.name,
            str(r.uid),
            str(r.windows_accepted),
            f"{r.mean_score:,.0f}",
            f"{r.weight:.3f}",
            f"{r.incentive:.3f}",
            f"{r.emission:.3f}",
            "—" if r.utilization is None else f"{r.utilization:.0%}",
            str(r.late_reveals),
            *([r.last_rejection or "—"] if rejections else []),
        )
    return table


def trained_windows(net: Localnet) -> list[int]:
    """The windows any miner trained, in order."""
    windows: set[int] = set()
    for neuron in net.neurons:
        if neuron.role == "miner":
            records = node_records(neuron.work_dir / "metrics.jsonl")
            windows.update(r.window for r in records if isinstance(r.record, TrainRecord))
    return sorted(windows)


def _windows(numbers: list[int]) -> str:
    return ("window " if len(numbers) == 1 else "windows ") + ", ".join(map(str, numbers))


def accepted_note(checked: list[int], trained: list[int], windows: int) -> str:
    """Why "windows accepted" can fall short of --windows: of the windows the validators checked,
    those no miner trained, and the windows miners trained that no validator checked."""
    lines = [
        f"windows accepted: of the {len(checked)} windows the validators checked, as the honest one with "
        "the most stake reported"
    ]
    unmined = [w for w in checked if w not in trained]
    before = [w for w in unmined if trained and w < trained[0]]
    if before:
        lines.append(
            f"{_windows(before)}: checked, but trained by no miner: the miners started too late in it to "
            f"train it before its commit deadline, and began with window {trained[0]}"
        )
    if rest := [w for w in unmined if w not in before]:
        lines.append(f"{_windows(rest)}: checked, but trained by no miner")
    after = [w for w in trained if checked and w > checked[-1]]
    if after:
        lines.append(
            f"{_windows(after)}: trained, but not checked: each validator stops after its {windows} windows "
            f"(--windows), and theirs ended with window {checked[-1]}"
        )
    if missed := [w for w in trained if w not in checked and w not in after]:
        lines.append(f"{_windows(missed)}: trained, but checked by no validator")
    return "\n".join(lines)


def signed_reports(net: Localnet, windows: list[int]) -> list[WindowReport]:
    """Every validator's report of each of `windows` that it signed and that reads as a report; one
    that is missing or does not is left out."""
    store = net.open_store(create=False)
    assert net.chain is not None, "the localnet made or opened its chain"
    mg = net.chain.metagraph()
    max_bytes = net.config.limits.max_report_bytes
    reports = []
    for w in windows:
        for neuron in net.neurons:
            if neuron.role != "validator":
                continue
            validator = _hotkey(net, neuron.name)
            try:
                doc = open_document(
                    store.get(report_key(run_id(net.config), w, validator), max_bytes),
                    max_bytes=max_bytes,
                    is_registered=lambda hk: mg.uid_of(hk) is not None,
                    signer=validator,
                )
                reports.append(parse_body(WindowReport, doc.body))
            except (StoreError, WireError):
                continue
    return reports


def heldout_curve(net: Localnet, windows: list[int]) -> list[float]:
    """Held-out loss of the global model at the start of `windows[0]`, then after each of `windows`,
    evaluated on the network's device. Waits for the last window's aggregate deadline: until then
    its aggregates are not final."""
    return _heldout(net, windows)[0]


def heldout_losses(net: Localnet, first: int, last: int) -> tuple[float, float]:
    """Held-out loss of the global model at the start of window `first` and after window `last`."""
    curve = heldout_curve(net, sorted({first, last}))
    return curve[0], curve[-1]


def _heldout(net: Localnet, windows: list[int]) -> tuple[list[float], Runtime]:
    cfg = net.config.windows
    chain = net.chain
    assert chain is not None, "the localnet made or opened its chain"
    chain.wait_for_block(
        aggregate_deadline(cfg, windows[-1]), timeout=2 * cfg.blocks_per_window * chain.block_time()
    )
    runtime = build_runtime(net.config, net.options.device, data_access=net.data_access())
    curve = HeldoutCurve(runtime, chain, StoreCache())
    return [curve.loss(target) for target in [windows[0], *(w + 1 for w in windows)]], runtime


def summarize(net: Localnet, windows: list[int]) -> RunSummary:
    """What the run's end measures for its report (`report.py`): the held-out curve over
    `windows`, the device and the model's size; written to the network's folder."""
    losses, runtime = _heldout(net, windows)
    summary = RunSummary(
        windows=windows,
        losses=losses,
        sequences=int(runtime.data.heldout.shape[0]),
        device=device_name(runtime.device),
        parameters=count_parameters(runtime.model),
    )
    write_summary(net.work, summary)
    return summary


def network_report(net: Localnet) -> str:
    """The network's report (`report.py`) from its folder, written there as report.md."""
    summary = read_summary(net.work)
    cfg = net.config
    miners = sum(n.role == "miner" for n in net.neurons)
    validators = sum(n.role == "validator" for n in net.neurons)
    size = f", {summary.parameters:,} parameters" if summary else ""
    title = (
        f"Smoke window: {miners} miners and {validators} validator(s) on {summary.device if summary else 'a device not recorded'}, "
        f"run config {cfg.name} (preset {cfg.model.preset}{size}, vocabulary {cfg.data.vocab_size or 'of the tokenizer'}, "
        f"{cfg.train.batch_size} × {cfg.data.seq_len} tokens a step)"
    )
    reports = signed_reports(net, processed_windows(net))
    text = report_markdown(title, node_metrics(net.neurons), reports, summary)
    (net.work / REPORT).write_text(text)
    return text


def processed_windows(net: Localnet) -> list[int]:
    """The windows the validators reported on, in order."""
    windows: set[int] = set()
    for neuron in net.neurons:
        path = neuron.work_dir / "metrics.jsonl"
        if neuron.role == "validator" and path.exists():
            windows.update(r.window for r in read_metrics(path))
    return sorted(windows)
