"""The checks of what a run of bench/chaos.py left behind, and what each outage cost."""

from __future__ import annotations

import hashlib
import json
import re
import time
from dataclasses import dataclass
from pathlib import Path

from _chaos_plan import OBJECT_LIMIT, PHASES, S3_BUCKET, STORE_KINDS
from _chaos_records import Check, Disruption, log_records
from _chaos_run import LOCK_SAMPLE_S, Harness

from distrai.chain.local_db import SLOW_LOCK_SECONDS
from distrai.localnet.s3server import FAKE_ACCESS_KEY_ID, FAKE_SECRET_ACCESS_KEY
from distrai.localnet.view import signed_reports
from distrai.node.metrics import node_records, read_metrics
from distrai.node.metrics_records import MetricsLine, RevealRecord, TrainRecord, ValidatorWindowRecord
from distrai.protocol.announce import committed_updates
from distrai.protocol.layout import aggregate_key, manifest_key, window_prefix
from distrai.protocol.trajectory import decode_trajectory
from distrai.protocol.windows import aggregate_deadline, commit_deadline, committed_in_time, window_start
from distrai.store import FileStore, Store, StoreError
from distrai.store.temps import TEMP_SUFFIX
from distrai.train.coded_state import check_coded_state
from distrai.train.tensorfile import blob_format
from distrai.train.tensorfile import decode_tensors as decode_record_tensors
from distrai.train.train_state import decode_state
from distrai.wire.blob_records import CheckpointRecord, CodedStateRecord
from distrai.wire.window_documents import WindowReport
from validators.pay import Pending, add_window, forfeit, mature
from validators.validator_state import ValidatorState

LOG_SLACK_S = 8.0
"""Log records up to this long after a disruption ends still count as the node's account of it."""


def validator_records(path: Path) -> list[tuple[MetricsLine, ValidatorWindowRecord]]:
    """A validator's window records, each with its line (the window and the time it was written)."""
    return [
        (line, line.record) for line in node_records(path) if isinstance(line.record, ValidatorWindowRecord)
    ]


@dataclass(frozen=True)
class LoggedBar:
    """A bar a validator's log announces ("window W: uid U barred until window X: reason"), and
    whether it was a hold for a withheld reveal that the validator's re-read one window later lifted
    ("… withheld reveal is there now and passes: bar lifted", or, for a validator restarted since,
    "… hold cannot be read again here …: bar lifted"; `Validator.reread_withheld`)."""

    window: int
    uid: int
    until: int
    reason: str
    withheld: bool
    lifted: bool


BAR = re.compile(r"window (\d+): uid (\d+) barred until window (\d+): (.*)")
LIFTED = re.compile(
    r"window (\d+): (\w+)'s (?:withheld reveal is there now and passes|hold cannot be read again here[^:]*): "
    r"bar lifted"
)


def logged_bars(path: Path, hotkeys: list[str]) -> list[LoggedBar]:
    """Every bar in the validator log at `path`, oldest first (`hotkeys`: the metagraph's, by uid,
    to read the hotkey prefix a lift names)."""
    records = log_records(path)
    lifted = {
        (int(m[1]), uid)
        for r in records
        if (m := LIFTED.match(r.message))
        for uid, hotkey in enumerate(hotkeys)
        if hotkey.startswith(m[2])
    }
    return [
        LoggedBar(
            int(m[1]),
            int(m[2]),
            int(m[3]),
            m[4],
            withheld=": withheld: " in m[4],
            lifted=(int(m[1]), int(m[2])) in lifted,
        )
        for r in records
        if (m := BAR.match(r.message))
    ]


def ema_from_records(
    records: list[tuple[int, ValidatorWindowRecord]],
    n: int,
    alpha: float,
    maturity: int,
    bars: list[LoggedBar] = (),
) -> tuple[list[float], list[int]]:
    """The moving average the validator's metrics imply (first record of each window), as
    tests/test_localnet_e2e.py recomputes it: each window's scores entering it `maturity` windows late
    (`validators.pay`), those of a uid the validator barred in a window (`bars`, from its log)
    forfeited and its average reset to 0 as `fold_scores` does, a uid held for a withheld reveal
    left waiting until the next window the validator checks, which lifts the hold (the scores mature
    again) or forfeits them (`validators.withheld.after_reread`), and a uid no validator measured
    (`unmeasured/uid`) left as it was. `records`: (window, record) in the order written."""
    windows = sorted({w for w, _ in records})
    averages: dict[str, float] = {str(uid): 0.0 for uid in range(n)}
    pending: Pending = {}
    held: dict[str, LoggedBar] = {}
    for w in windows:
        for uid, bar in list(held.items()):
            if bar.window < w:
                del held[uid]
                if not bar.lifted:
                    pending, _ = forfeit(pending, uid)
                    averages[uid] = 0.0
        record = next(r for window, r in records if window == w)
        scores = {
            str(uid): None if uid in record.unmeasured else record.scores.get(uid, 0.0) for uid in range(n)
        }
        pending = add_window(pending, w, scores)
        for bar in (b for b in bars if b.window == w):
            if bar.withheld:
                held[str(bar.uid)] = bar
            else:
                pending, _ = forfeit(pending, str(bar.uid))
                averages[str(bar.uid)] = 0.0
        averages, pending = mature(averages, pending, w - maturity, alpha, held)
    return [averages[str(uid)] for uid in range(n)], windows


def check_processes(h: Harness) -> Check:
    """No crash during the run, and every process exited 0 (by itself once its windows were done,
    or on SIGINT for a restarted one past the run's windows)."""
    details = [str(c) for c in h.crashes] + list(h.problems)
    codes = {n.name: n.process.returncode for n in h.net.neurons}
    details += [f"{name} exited {code}" for name, code in codes.items() if code != 0]
    for d in h.disruptions:
        dead = [name for name, alive in d.alive_after.items() if not alive]
        if dead:
            details.append(f"after the {d.kind}: {', '.join(dead)} no longer running")
    ok = not details
    summary = (
        f"no crash; every process exited 0 ({len(h.stopped_by_harness)} restarted ones on SIGINT after the run's windows)"
        if ok
        else f"{len(details)} problem(s)"
    )
    return Check("processes", ok, summary, details)


def check_run_completed(h: Harness) -> Check:
    """The run got through its windows: no node ended before the run's end, every validator
    folded the run's last window (or a later one), and every miner killed a window or more
    before the end trained again after its last kill."""
    details = []
    for name in sorted(h.finished_early):
        details.append(f"{name} exited by itself at block {h.finished_early[name]}, before the run's end")
    for neuron in h.net.neurons:
        if neuron.role == "validator":
            reached = h.saved_state(neuron.name).window
            if reached < h.last_validated_window:
                details.append(
                    f"{neuron.name} got to w{reached}, not to the run's last w{h.last_validated_window}"
                )
        else:
            trained = [
                r.window
                for r in read_metrics(neuron.work_dir / "metrics.jsonl")
                if isinstance(r.record, TrainRecord)
            ]
            kills = [k.block for k in h.kills if k.node == neuron.name]
            last_kill = max(kills, default=-1)
            if last_kill < window_start(h.cfg, h.last_miner_window - 1) and not any(
                window_start(h.cfg, w) + h.cfg.commit_offset > last_kill for w in trained
            ):
                details.append(f"{neuron.name} trained no window after its last kill (block {last_kill})")
    ok = not details
    return Check(
        "run completed",
        ok,
        f"validators through w{h.last_validated_window}; every miner trained again after its kills"
        if ok
        else f"{len(details)} problem(s)",
        details,
    )


def check_validator_state(h: Harness) -> Check:
    """After each validator kill: the state on disk is not behind the state before it, and the
    restarted process says it resumes at that window; at the end, every validator's averages are
    the EMA of the scores in its metrics records. Both hold whether the killed window is checked
    again after the restart (its scores are folded once: state and record are written only when
    the window is done) or skipped (neither the state nor the metrics hold it)."""
    details, notes = [], []
    scoring = h.net.config.scoring
    for k in (k for k in h.kills if k.role == "validator"):
        before, after = ValidatorState(**k.state_before), ValidatorState(**k.state_after)
        if after.window < before.window:
            details.append(
                f"kill {k.index} ({k.node}): state went back from w{before.window} to w{after.window}"
            )
        elif after.window == before.window and (
            after.averages != before.averages or after.banned_until != before.banned_until
        ):
            details.append(
                f"kill {k.index} ({k.node}): state of w{after.window} changed without a new window"
            )
        started = [
            int(m[1]) if m[1] is not None else -1
            for r in log_records(h.net.neuron(k.node).log_path, k.log_offset)
            if (
                m := re.search(
                    r"started on run \S+, (?:its last window checked (\d+)|no window checked yet)", r.message
                )
            )
        ]
        if not started:
            details.append(f"kill {k.index} ({k.node}): the restarted process never said it started")
        elif started[0] < before.window:
            details.append(
                f"kill {k.index} ({k.node}): restarted at window {started[0]}, behind w{before.window} saved before the kill"
            )
        records = validator_records(h.net.neuron(k.node).work_dir / "metrics.jsonl")
        nxt = after.window + 1
        redone = [line for line, _ in records if line.window == nxt and line.time > k.wall]
        k.outcome = f"resumed at w{started[0] if started else '?'} (saved w{before.window}); " + (
            f"w{nxt} checked after the restart" if redone else f"w{nxt} skipped"
        )
        folded = {line.window for line, _ in records}
        if after.window >= 0 and after.window not in folded:
            details.append(
                f"kill {k.index} ({k.node}): w{after.window} was folded into the saved state but has no "
                "metrics record (killed between save_state and metrics.log)"
            )
    n = h.chain.metagraph().n
    for neuron in (n_ for n_ in h.net.neurons if n_.role == "validator"):
        final = h.saved_state(neuron.name)
        records = validator_records(neuron.work_dir / "metrics.jsonl")
        averages, windows = ema_from_records(
            [(line.window, record) for line, record in records],
            n,
            scoring.ema_alpha,
            scoring.maturity_windows,
            logged_bars(neuron.log_path, h.chain.metagraph().hotkeys),
        )
        worst = max((abs(a - b) for a, b in zip(averages, final.averages, strict=False)), default=0.0)
        if len(averages) != len(final.averages) or worst > 1e-12:
            details.append(
                f"{neuron.name}: final averages differ from the EMA of its metrics (windows {windows}) by {worst:.3g}"
            )
        else:
            notes.append(f"{neuron.name}: state at w{final.window}, averages = EMA over windows {windows}")
        duplicated = sorted(
            {line.window for line, _ in records if sum(x.window == line.window for x, _ in records) > 1}
        )
        if duplicated:
            details.append(f"{neuron.name}: windows folded twice in its metrics: {duplicated}")
    kills = sum(k.role == "validator" for k in h.kills)
    ok = not details
    return Check(
        "validator state",
        ok,
        f"{kills} validator kills: no state behind the one before the kill; final averages = EMA of metrics"
        if ok
        else f"{len(details)} problem(s) over {kills} validator kills",
        details or notes,
    )


def anchored_manifests(h: Harness) -> dict[str, dict[int, dict]]:
    """Miner name → window → body of the manifest its chain commitment anchored for that window
    (as of the block before the commit deadline), read from the store; the miners' own record of
    the residual they carried from window to window."""
    names = {h.hotkey(n.name): n.name for n in h.net.neurons if n.role == "miner"}
    out: dict[str, dict[int, dict]] = {name: {} for name in names.values()}
    store, limit = h.store(), h.net.config.limits.max_manifest_bytes
    for w in range(h.first_window, h.last_miner_window + 2):
        deadline = commit_deadline(h.cfg, w)
        if deadline - 1 > h.chain.block():
            break
        counted = committed_updates(
            h.chain.commitments(block=deadline - 1), w, lambda b, w=w: committed_in_time(h.cfg, w, b)
        )
        for hotkey, announcement in counted.items():
            try:
                data = store.get(manifest_key(h.run_id, w, hotkey), limit)
            except StoreError:
                continue
            if hashlib.sha256(data).hexdigest() == announcement.manifest_sha256 and hotkey in names:
                out[names[hotkey]][w] = json.loads(data)["body"]
    return out


def check_miner_reveals(h: Harness, manifests: dict[str, dict[int, dict]]) -> list[Check]:
    """After each miner kill, every reveal job that was on disk is resumed and done in time (or
    was never anchored, so nobody is owed it), and the miner's anchored manifests keep one residual
    chain: each window's `residual_in_hash` is the `residual_out_hash` of the window before it
    that the miner anchored, across every restart."""
    details = []
    for k in (k for k in h.kills if k.role == "miner"):
        neuron = h.net.neuron(k.node)
        after = log_records(neuron.log_path, k.log_offset)
        reveals = [
            (line.window, line.record)
            for line in read_metrics(neuron.work_dir / "metrics.jsonl")
            if isinstance(line.record, RevealRecord) and line.time > k.wall
        ]
        outcomes = []
        for w in k.in_flight:
            resumed = any(f"window {w}: resuming its reveal" in r.message for r in after)
            unanchored = any(f"window {w}: its manifest was never anchored" in r.message for r in after)
            done = [r for window, r in reveals if window == w]
            if unanchored:
                outcomes.append(f"w{w} never anchored (killed before its commitment)")
            elif down_over_deadline(after, w):
                outcomes.append(f"w{w} due while the miner was down, and said so after the restart")
            elif resumed and done and not done[0].reveal_late:
                outcomes.append(f"w{w} resumed after the restart, done in {done[0].upload_seconds:.1f} s")
            elif resumed and done:
                outcomes.append(f"w{w} resumed but late")
                details.append(
                    f"kill {k.index} ({k.node}): the reveal of w{w} resumed but missed its deadline"
                )
            elif resumed:
                outcomes.append(f"w{w} resumed, never finished")
                said = [r.message for r in after if f"window {w}:" in r.message]
                details.append(
                    f"kill {k.index} ({k.node}): the reveal of w{w} resumed but never finished "
                    f"(no reveal record after the kill; the miner's last line on w{w}: {said[-1]!r}; "
                    f"its job {'still' if w in h.sealed_jobs(k.node) else 'no longer'} on disk)"
                )
            else:
                outcomes.append(f"w{w} LOST")
                details.append(
                    f"kill {k.index} ({k.node}): the reveal of w{w} in flight was neither resumed nor done"
                )
        k.outcome = "; ".join(outcomes) or "no reveal in flight"
        if any("carrying on the codec residual" in r.message for r in after):
            k.outcome += "; residual taken from the job"
        nxt = min(
            (w for w in manifests.get(k.node, {}) if window_start(h.cfg, w) + h.cfg.commit_offset > k.block),
            default=None,
        )
        k.outcome += f"; next anchored window w{nxt}" if nxt is not None else "; no later window anchored"
    kills = sum(k.role == "miner" for k in h.kills)
    in_flight = sum(len(k.in_flight) for k in h.kills if k.role == "miner")
    resumed = Check(
        "reveals in flight resumed",
        not details,
        f"{in_flight} reveal(s) in flight at {kills} miner kills, each resumed and done in time, or due "
        "while its miner was down and said so"
        if not details
        else f"{len(details)} of {in_flight} reveal(s) in flight lost or late",
        details,
    )
    details, links = [], 0
    for miner, by_window in manifests.items():
        windows = sorted(by_window)
        for a, b in zip(windows, windows[1:], strict=False):
            links += 1
            if by_window[b].get("residual_in_hash") != by_window[a].get("residual_out_hash"):
                kills = [k.index for k in h.kills if k.node == miner and window_start(h.cfg, a) <= k.block]
                details.append(
                    f"{miner}: the manifest of w{b} does not carry in the residual w{a} committed"
                    + (f" (after kill {kills[0]})" if kills else "")
                )
    chain = Check(
        "miner residual chain",
        not details,
        f"{links} window-to-window links of the miners' anchored manifests, every one intact"
        if not details
        else f"{len(details)} of {links} links broken",
        details,
    )
    return [resumed, chain]


def check_residual_reports(
    h: Harness, reports: list[WindowReport], manifests: dict[str, dict[int, dict]]
) -> Check:
    """No validator reports a miner's window as failing `trajectory` with "residual_in_hash does
    not continue" — after a miner restart or otherwise. Each report is explained against the
    miners' anchored manifests: when they show an intact chain, the break is the validator's
    (it did not read the miner's previous anchored window: skipped after a restart, or its store
    was unreachable), not the miner's."""
    names = {h.hotkey(n.name): n.name for n in h.net.neurons}
    seen = {
        (report.validator, report.window, hotkey): entry
        for report in reports
        for hotkey, entry in report.miners.items()
    }
    details, after_restart = [], 0
    for report in reports:
        validator, w = report.validator, report.window
        for hotkey, entry in report.miners.items():
            if "residual_in_hash does not continue" not in (entry.reason or ""):
                continue
            miner = names.get(hotkey, hotkey[:10])
            anchored = manifests.get(miner, {})
            last = max((x for x in anchored if x < w), default=None)
            intact = (
                last is not None
                and w in anchored
                and (anchored[w].get("residual_in_hash") == anchored[last].get("residual_out_hash"))
            )
            restarted = [
                k.index
                for k in h.kills
                if k.node == miner
                and last is not None
                and window_start(h.cfg, last) <= k.block < window_start(h.cfg, w)
            ]
            after_restart += bool(restarted)
            before = seen.get((validator, last, hotkey)) if last is not None else None
            read_last = before is not None and before.verdicts.get("manifest") == "pass"
            if intact and not read_last:
                cause = f"the miner's manifests chain correctly from w{last}; the validator never read its w{last} manifest"
            elif intact:
                cause = f"the miner's manifests chain correctly from w{last}; unexplained"
            else:
                cause = f"the miner's own manifests break the chain after w{last}"
            details.append(
                f"{names.get(validator, validator[:10])} w{w}: {miner}"
                + (f" (restarted, kill {restarted[0]})" if restarted else "")
                + f" — {cause}"
            )
    ok = not details
    return Check(
        "no residual chain reported broken",
        ok,
        "no report says residual_in_hash does not continue"
        if ok
        else f"{len(details)} report(s) of a broken residual chain, {after_restart} of them after the miner's restart",
        details,
    )


def down_over_deadline(records, window: int) -> bool:
    """Whether a restarted miner's log (`records`, from its restart on) says that the reveal deadline
    of `window` passed while it was down: no restart can bring that reveal back, and docs/protocol.md
    ("Withheld reveals") bars a challenged miner for it, as it bars one that hides its reveal."""
    return any(
        f"window {window}: its reveal deadline" in r.message
        and "passed while the miner was down" in r.message
        for r in records
    )


def down_at_reveal(h: Harness, window: int, miner: str) -> int | None:
    """The kill of `miner` that kept it down over the reveal deadline of `window`, if one did."""
    return next(
        (
            k.index
            for k in h.kills
            if k.node == miner
            and window in k.in_flight
            and down_over_deadline(log_records(h.net.neuron(k.node).log_path, k.log_offset), window)
        ),
        None,
    )


def fraud_cause(reason: str, h: Harness, window: int, miner: str) -> str:
    """Why an honest miner was judged a cheat, as far as the run shows."""
    if "another base model" in reason or "not the window's starting state" in reason:
        return "the validator and the miner are on different global models (see: one global model)"
    if re.search(r"symbolic links|file store \w+ .* failed|s3 \w+ .* failed", reason):
        return "the validator could not read the store (outage) and took it for hiding"
    if "not in the store at the reveal deadline" in reason or "not revealed" in reason:
        killed = [k.index for k in h.kills if k.node == miner and k.in_flight and window in k.in_flight]
        if killed:
            return f"its reveal was cut by kill {killed[0]} and not resumed in time"
        return "its reveal was missing at the deadline"
    return "unexplained"


def excused_ban(bars: list[tuple[str, int, int]], miner: str, w: int) -> bool:
    """Whether a report's `banned` entry for `miner` in window w is what is left of a bar the
    checks excuse (`bars`: (miner, the window it was barred in, the window it is barred until),
    one for each such bar a validator logged): a bar holds in the windows after its own, before its
    end (`ValidatorState.is_banned`)."""
    return any(m == miner and barred < w < until for m, barred, until in bars)


def check_fraud(h: Harness, reports: list[WindowReport]) -> Check:
    """Every miner here is honest: none may be barred, in a report or a validator's state or log,
    except for a window whose reveal fell due while a kill kept the miner down (`down_at_reveal`): to
    a validator that challenged it, that miner hid its reveal, and the protocol bars it for a bounded
    time (docs/protocol.md, "Withheld reveals"), and a hold for a reveal an outage kept unread that
    the validator's re-read lifted one window later (the window's pay lost, nothing more). Those bars
    are counted, not failed, and so are the `banned` entries of the later windows they cover
    (`excused_ban`)."""
    names = {h.hotkey(n.name): n.name for n in h.net.neurons}
    hotkeys = h.chain.metagraph().hotkeys
    uids = {uid: names.get(hotkey, f"uid {uid}") for uid, hotkey in enumerate(hotkeys)}
    details, down, excused_bars, lifted = [], set(), [], []
    for neuron in (n for n in h.net.neurons if n.role == "validator"):
        for bar in logged_bars(neuron.log_path, hotkeys):
            miner = uids.get(bar.uid, f"uid {bar.uid}")
            if (kill := down_at_reveal(h, bar.window, miner)) is not None:
                down.add((neuron.name, bar.window, miner, kill))
                excused_bars.append((miner, bar.window, bar.until))
                continue
            if bar.lifted:
                lifted.append(f"{neuron.name} w{bar.window}: {miner}")
                excused_bars.append((miner, bar.window, bar.until))
                continue
            details.append(
                f"{neuron.name} w{bar.window}: {miner} barred until w{bar.until} — "
                f"{fraud_cause(bar.reason, h, bar.window, miner)} ({bar.reason[:160]})"
            )
    for report in reports:
        for hotkey, entry in report.miners.items():
            miner = names.get(hotkey, hotkey)
            if (
                "banned" in entry.verdicts
                and down_at_reveal(h, report.window, miner) is None
                and not excused_ban(excused_bars, miner, report.window)
            ):
                details.append(
                    f"{names.get(report.validator, '?')} w{report.window}: {miner} reported banned ({entry.reason})"
                )
    ok = not details
    excused = (
        f"; {len(down)} bar(s) of a miner a kill kept down over its reveal deadline (kills "
        f"{', '.join(str(k) for k in sorted({d[3] for d in down}))}), as the protocol rules"
        if down
        else ""
    ) + (
        f"; {len(lifted)} hold(s) for a reveal an outage kept unread, lifted by the next window's re-read "
        f"({', '.join(lifted)})"
        if lifted
        else ""
    )
    return Check(
        "no honest miner marked fraud",
        ok,
        (f"no other ban in {len(reports)} signed reports or the validators' logs" + excused)
        if ok
        else f"{len(details)} fraud verdict(s) or ban(s)" + excused,
        details,
    )


def check_global_model(h: Harness, reports: list[WindowReport]) -> Check:
    """Every node follows the same global model: per window, every node that synced it applied an
    aggregate with the same result (or all kept the model); a 'not following' line must name why,
    and the node must then have followed another validator; and no miner's update is refused for
    training from another base. (A validator's `leader_agreed_last_window` compares its own
    judgement of a window with the leader's, which differ legitimately when one of them met an
    outage or a restart in that window; it says nothing about which model is followed.)"""
    names = {h.hotkey(n.name)[:10]: n.name for n in h.net.neurons}
    full = {h.hotkey(n.name)[:10]: h.hotkey(n.name) for n in h.net.neurons}
    results: dict[tuple[int, str], str | None] = {}
    details, refusals = [], 0
    store, limit = h.store(), h.net.config.limits.max_manifest_bytes

    def result_of(w: int, prefix: str) -> str | None:
        if (w, prefix) not in results:
            key = aggregate_key(h.run_id, w, full.get(prefix, prefix))
            try:
                results[(w, prefix)] = json.loads(store.get(key, limit))["body"]["result_hash"]
            except (StoreError, ValueError, KeyError):
                results[(w, prefix)] = None
        return results[(w, prefix)]

    def base_of(w: int) -> str | None:
        """The model a window's aggregates start from, which a node that keeps the model keeps."""
        bases = set()
        try:
            keys = store.list(f"{window_prefix(h.run_id, w)}/aggregates/")
        except StoreError:
            keys = []
        for key in (k for k in keys if k.endswith(".json")):
            try:
                bases.add(json.loads(store.get(key, limit))["body"]["base_hash"])
            except (StoreError, ValueError, KeyError):
                continue
        return bases.pop() if len(bases) == 1 else None

    outcomes: dict[int, dict[str, set[str]]] = {}
    for neuron in h.net.neurons:
        records = log_records(neuron.log_path)
        for i, r in enumerate(records):
            if m := re.match(r"window (\d+): applied (\S+?)'s aggregate", r.message):
                w = int(m[1])
                outcomes.setdefault(w, {}).setdefault(neuron.name, set()).add(
                    result_of(w, m[2]) or f"unreadable aggregate of {names.get(m[2], m[2])}"
                )
            elif m := re.match(r"window (\d+): no aggregate anchored and verifiable", r.message):
                w = int(m[1])
                outcomes.setdefault(w, {}).setdefault(neuron.name, set()).add(base_of(w) or "model kept")
            elif m := re.match(r"window (\d+): not following (\S+?)'s aggregate: ?(.*)", r.message):
                refusals += 1
                w, reason = int(m[1]), m[3].strip()
                served = next(
                    (
                        x
                        for x in records[i + 1 :]
                        if x.message.startswith(f"window {w}: applied")
                        or x.message.startswith(f"window {w}: no aggregate")
                    ),
                    None,
                )
                who = names.get(m[2], m[2])
                if not reason:
                    details.append(f"{neuron.name}: refused {who}'s aggregate of w{w} without a reason")
                elif served is None or not served.message.startswith(f"window {w}: applied"):
                    details.append(
                        f"{neuron.name}: refused {who}'s aggregate of w{w} ({reason[:120]}) and no other validator served"
                    )
    for w in sorted(outcomes):
        seen = set().union(*outcomes[w].values())
        if len(seen) > 1:
            by = "; ".join(
                f"{node}: {', '.join(sorted(x[:12] for x in s))}" for node, s in sorted(outcomes[w].items())
            )
            details.append(f"w{w}: nodes reached different models ({by})")
    for report in reports:
        for hotkey, entry in report.miners.items():
            if "another base model" in (entry.reason or ""):
                details.append(
                    f"{names.get(report.validator[:10], '?')} w{report.window}: "
                    f"{names.get(hotkey[:10], hotkey[:10])} trained from another base model"
                )
    ok = not details
    return Check(
        "one global model",
        ok,
        f"{len(outcomes)} windows synced alike by every node; {refusals} refusal(s), each followed by another validator"
        if ok
        else f"{len(details)} problem(s)",
        details,
    )


def left_writes(h: Harness, store: Store) -> list[tuple[str, int, float]]:
    """The writes begun in the nodes' store and never finished, as (where, bytes, unix time it was
    written): temp files of a file store (which its keys do not list), or unfinished multipart
    uploads of an S3 store (of which only the harness's own client can ask the server)."""
    if isinstance(store, FileStore):
        return [
            (path.relative_to(store.root).as_posix(), path.stat().st_size, path.stat().st_mtime)
            for path in sorted(store.root.rglob("*" + TEMP_SUFFIX))
            if path.is_file()
        ]
    assert h.s3_endpoint is not None, "the nodes' store is a file store or on the run's S3 server"
    import boto3

    client = boto3.session.Session(
        aws_access_key_id=FAKE_ACCESS_KEY_ID,
        aws_secret_access_key=FAKE_SECRET_ACCESS_KEY,
        region_name="us-east-1",
    ).client("s3", endpoint_url=h.s3_endpoint)
    pages = client.get_paginator("list_multipart_uploads").paginate(Bucket=S3_BUCKET)
    uploads = [upload for page in pages for upload in page.get("Uploads", [])]
    return [(f"{u['Key']} (upload {u['UploadId']})", 0, u["Initiated"].timestamp()) for u in uploads]


def check_store(h: Harness) -> list[Check]:
    """Every object under the store whole (states load, tensors and checkpoints decode, JSON
    documents parse, blobs hash to their names), read through the store's API, and no write of
    an interrupted writer left anywhere in the store (`left_writes`)."""
    store = h.store()
    limit = h.net.config.limits.max_checkpoint_bytes
    broken, temps, counted = [], [], 0
    for where, size, written in left_writes(h, store):
        cause = next(
            (
                f"kill {k.index} of {k.node}"
                for k in h.kills
                if k.role == "miner" and abs(k.wall - written) < 2.0
            ),
            None,
        ) or next(
            (f"the {d.kind}" for d in h.disruptions if d.wall_start - 2.0 <= written <= d.wall_end + 2.0),
            "unknown",
        )
        temps.append(
            f"{where} ({size} bytes, written {time.strftime('%H:%M:%S', time.localtime(written))}, at {cause})"
        )
    for key in store.list():
        counted += 1
        try:
            data = store.get(key, OBJECT_LIMIT)
            if key.startswith("blobs/"):
                if hashlib.sha256(data).hexdigest() != key.removeprefix("blobs/"):
                    raise ValueError("does not hash to its name")
            elif key.endswith(".json"):
                json.loads(data)
            elif "/states/" in key and blob_format(data) == CodedStateRecord.kind():
                check_coded_state(data, limit)
            elif "/states/" in key:
                decode_state(data)
            elif "/trajectories/" in key:
                decode_trajectory(data, max_bytes=limit)
            elif "/checkpoints/" in key:
                decode_record_tensors(data, CheckpointRecord, max_bytes=limit)
            else:
                raise ValueError("an object of no known kind")
        except Exception as exc:  # noqa: BLE001 - every failure is a finding
            broken.append(f"{key}: {type(exc).__name__}: {str(exc)[:160]}")
    return [
        Check(
            "store objects whole",
            not broken,
            f"{counted} objects, every one whole"
            if not broken
            else f"{len(broken)} of {counted} objects broken",
            broken,
        ),
        Check(
            "no temp file left",
            not temps,
            "no temp file in the store"
            if not temps
            else f"{len(temps)} temp file(s) of interrupted writes left",
            temps,
        ),
    ]


STORE_WORDS = re.compile(r"store|symbolic links|not following|publish|reveal failed|commit failed", re.I)
S3_WORDS = re.compile(
    STORE_WORDS.pattern + r"|\bs3\b|timeout|timed out|endpoint|out of reach|connect|unreachable", re.I
)
"""An S3 store's errors name the operation and the bucket (`s3 get 'KEY' in s3://… failed: …`),
its retries botocore's error (`Read timeout on endpoint URL`, `Could not connect to the endpoint
URL`), and a node's outage log what is out of reach (`distrai.store.outage`)."""
CHAIN_WORDS = re.compile(r"chain|database|locked|sqlite|deadline", re.I)
OUTAGE_WORDS = {"store outage": STORE_WORDS, "S3 server paused": S3_WORDS, "chain stall": CHAIN_WORDS}
"""The words that make a node's warning or error a line about an outage of that kind."""


def outage_said(h: Harness, d: Disruption) -> tuple[list[str], list[str], list[str]]:
    """Reads the nodes' logs over `d` into `d.said` and `d.outcome`; returns the nodes that met it
    and said nothing of it, what kept it from being survived, and notes of what the nodes said.
    Chain stall: each node seen waiting on the chain's lock longer than the chain logs a wait
    (`SLOW_LOCK_SECONDS`, plus a sample) must have said so (a node that did not touch the chain
    during the stall, or waited less, has nothing to say). Store outage: which node touched the
    store in it cannot be seen from outside, and one shorter than a window finds some nodes idle
    until their next deadline (no record at all) or working without the store (a miner training
    from its cached shards), so the nodes are silent only when none of them logged a warning or
    error about the store in it; each node that did neither is noted."""
    words = S3_WORDS if d.kind in STORE_KINDS and h.options.on_s3 else OUTAGE_WORDS[d.kind]
    silent, tracebacks, notes = [], [], []
    for neuron in h.net.neurons:
        span = [
            r
            for r in log_records(neuron.log_path, d.log_offsets.get(neuron.name, 0))
            if r.time is None or r.time <= d.wall_end + LOG_SLACK_S
        ]
        d.said[neuron.name] = [
            r.message for r in span if r.level in ("WARNING", "ERROR", "CRITICAL") and words.search(r.message)
        ]
        if d.kind in STORE_KINDS:
            busy = [
                r
                for r in span
                if r.level in ("INFO", "WARNING", "ERROR") and r.time and r.time >= d.wall_start - 1
            ]
            if neuron.name in d.running and not d.said[neuron.name]:
                notes.append(
                    f"{neuron.name}: no store error, but went on: {busy[-1].message[:120]}"
                    if busy
                    else f"{neuron.name}: logged nothing during it (idle until its next deadline)"
                )
        elif (
            neuron.name in d.running
            and d.waited.get(neuron.name, 0.0) > SLOW_LOCK_SECONDS + LOCK_SAMPLE_S
            and not d.said[neuron.name]
        ):
            silent.append(neuron.name)
        if any(r.level == "RAW" or "Traceback" in r.message for r in span):
            tracebacks.append(neuron.name)
    if d.kind in STORE_KINDS and not any(d.said.values()):
        silent = sorted(d.running)
    dead = [name for name, alive in d.alive_after.items() if not alive]
    dead += [
        f"{c.node} (crashed at block {c.block}: {c.error})"
        for c in h.crashes
        if d.wall_start <= c.wall <= d.wall_end + LOG_SLACK_S
    ]
    problems = [f"not running during or right after it: {', '.join(dead)}"] if dead else []
    if tracebacks:
        problems.append(f"a traceback in the log during it: {', '.join(tracebacks)}")
    waits = ", ".join(f"{n} {s:.1f} s" for n, s in d.waited.items() if s > 0) or "nobody"
    if d.kind == "chain stall":
        notes.append(f"seen waiting on the chain's lock (sampled every {LOCK_SAMPLE_S} s): {waits}")
    if silent:
        notes.append(f"said nothing about it in its log: {', '.join(silent)}")
    for name, said in d.said.items():
        notes += [f"{name}: {line[:200]}" for line in said[:3]]
    d.outcome = ("survived" if not problems else "NOT survived") + (
        f"; silent: {', '.join(silent)}" if silent else "; every node that met it logged it"
    )
    if d.kind == "chain stall":
        d.outcome += f"; waited on the lock: {waits}"
    return silent, problems, notes


def check_disruption(h: Harness, kind: str) -> list[Check]:
    """Every outage of `kind` survived (every process alive right after it, no traceback) and
    accounted for in the logs (`outage_said`)."""
    found = [d for d in h.disruptions if d.kind == kind]
    if not found:
        return []
    silent, problems, notes = [], [], []
    for d in found:
        label = f"blocks {d.block}–{d.end_block}: " if len(found) > 1 else ""
        quiet, failed, said = outage_said(h, d)
        silent += [f"{label}{x}" for x in quiet]
        problems += [f"{label}{x}" for x in failed]
        notes += [f"{label}{x}" for x in said]
    how = "; ".join(sorted({d.how for d in found}))
    return [
        Check(
            f"{kind} survived",
            not problems,
            ("every process still running, no traceback" if not problems else "; ".join(problems))
            + f" ({len(found)} × {how})",
            problems,
        ),
        Check(
            f"{kind} logged",
            not silent,
            "every node that met it said so in its log" if not silent else f"silent: {', '.join(silent)}",
            notes,
        ),
    ]


def outage_windows(h: Harness, d: Disruption) -> list[int]:
    """The validated windows an outage can cost: those under way during it (from the start of their
    train phase to their aggregate deadline) and the one that starts within a window after it."""
    cfg = h.cfg
    return [
        w
        for w in range(h.first_window, h.last_validated_window + 1)
        if d.block < window_start(cfg, w) + cfg.aggregate_offset
        and window_start(cfg, w) <= d.end_block + cfg.blocks_per_window
    ]


def accepted_updates(h: Harness) -> dict[int, int]:
    """Window → the most updates any validator accepted in it (its metrics record of the window)."""
    most: dict[int, int] = {}
    for neuron in (n for n in h.net.neurons if n.role == "validator"):
        for line, record in validator_records(neuron.work_dir / "metrics.jsonl"):
            most[line.window] = max(most.get(line.window, 0), record.accepted)
    return most


def committed_miners(h: Harness) -> dict[int, set[str]]:
    """Window → the miners whose commitment to it landed in time."""
    names = {h.hotkey(n.name): n.name for n in h.net.neurons if n.role == "miner"}
    return {
        w: {
            names[hotkey]
            for hotkey in committed_updates(
                h.chain.commitments(block=commit_deadline(h.cfg, w) - 1),
                w,
                lambda b, w=w: committed_in_time(h.cfg, w, b),
            )
            if hotkey in names
        }
        for w in range(h.first_window, h.last_miner_window + 1)
        if commit_deadline(h.cfg, w) - 1 <= h.chain.block()
    }


def repeated_line(messages: list[str]) -> tuple[int, str]:
    """The line most often repeated in `messages`, numbers other than window numbers masked (a node
    that logged each try of a retry loop repeats one line), and how often."""
    counts: dict[str, int] = {}
    for message in messages:
        line = re.sub(r"(?<!window )\b\d+(\.\d+)?\b", "#", message)
        counts[line] = counts.get(line, 0) + 1
    return max(((n, line) for line, n in counts.items()), default=(0, ""))


MAX_REPEATS = 2
"""Times a node may log one line about an outage: it starts, and it ends (`distrai.store.outage`)."""


def outage_costs(h: Harness) -> list[Check]:
    """What each outage cost, once `check_disruption` has read what the nodes said of it: windows
    lost (windows it can cost, `outage_windows`, in which no validator accepted an update, but for a
    window no miner had committed to when it began and one that kills emptied, `emptied_by_kills`;
    every other such window counts against it, whatever else happened in it), honest miners barred
    (bars the validators logged in those windows that no kill explains, `down_at_reveal`) and the
    lines the nodes logged of it (`d.said`: a line logged more than `MAX_REPEATS` times by one node
    is a line a try). Targets: at most one window lost, no honest miner barred, no line repeated."""
    accepted = accepted_updates(h)
    committed = committed_miners(h)
    miners = {n.name for n in h.net.neurons if n.role == "miner"}
    validators = {n.name for n in h.net.neurons if n.role == "validator"}

    def emptied_by_kills(w: int) -> bool:
        """Every miner either killed in its train phase before committing to it, or committed and
        kept down over its reveal deadline by a kill; or every validator killed after its commit
        deadline while its saved state was behind it (it skips the window)."""
        made = committed.get(w, set())
        out = {
            k.node
            for k in h.kills
            if k.role == "miner" and window_start(h.cfg, w) <= k.block < commit_deadline(h.cfg, w)
        } - made
        down = {m for m in made if down_at_reveal(h, w, m) is not None}
        skipped = {
            k.node
            for k in h.kills
            if k.role == "validator"
            and commit_deadline(h.cfg, w) <= k.block <= aggregate_deadline(h.cfg, w)
            and k.state_before["window"] < w
        }
        return miners <= out | down or validators <= skipped

    names = {h.hotkey(n.name): n.name for n in h.net.neurons}
    hotkeys = h.chain.metagraph().hotkeys
    bars = [
        (
            bar,
            neuron.name,
            names.get(hotkeys[bar.uid], f"uid {bar.uid}") if bar.uid < len(hotkeys) else f"uid {bar.uid}",
        )
        for neuron in h.net.neurons
        if neuron.role == "validator"
        for bar in logged_bars(neuron.log_path, hotkeys)
    ]
    lost, barred, repeated = [], [], []
    for d in h.disruptions:
        d.windows = outage_windows(h, d)
        d.lost = [
            w
            for w in d.windows
            if accepted.get(w, 0) == 0
            and (committed.get(w) or commit_deadline(h.cfg, w) > d.block)
            and not emptied_by_kills(w)
        ]
        d.barred = [
            f"{validator} w{bar.window}: {miner} ({bar.reason[:120]})"
            for bar, validator, miner in bars
            if bar.window in d.windows and not bar.lifted and down_at_reveal(h, bar.window, miner) is None
        ]
        d.held = [
            f"{validator} w{bar.window}: {miner}"
            for bar, validator, miner in bars
            if bar.window in d.windows and bar.lifted
        ]
        d.repeated = max(
            ((n, name, line) for name, said in d.said.items() for n, line in (repeated_line(said),)),
            default=(0, "", ""),
        )
        label = f"{d.kind} in the {d.phase} phase (blocks {d.block}–{d.end_block})"
        if len(d.lost) > 1:
            lost.append(f"{label}: windows {', '.join(map(str, d.lost))} with no update accepted")
        barred += [f"{label}: {b}" for b in d.barred]
        if d.repeated[0] > MAX_REPEATS:
            repeated.append(f"{label}: {d.repeated[1]} logged {d.repeated[0]} times: {d.repeated[2][:160]}")
    counted = len(h.disruptions)
    return [
        Check(
            "outage windows lost",
            not lost,
            f"{counted} outage(s), each cost at most one window"
            if not lost
            else f"{len(lost)} of {counted} outage(s) cost more than one window",
            lost,
        ),
        Check(
            "outage honest miners barred",
            not barred,
            f"{counted} outage(s), no honest miner barred in the windows they can cost"
            if not barred
            else f"{len(barred)} bar(s) of honest miners",
            barred,
        ),
        Check(
            "outage logged once",
            not repeated,
            f"{counted} outage(s), no node logged a line about one more than {MAX_REPEATS} times"
            if not repeated
            else f"{len(repeated)} of {counted} outage(s) logged a line a try",
            repeated,
        ),
    ]


def run_checks(h: Harness) -> list[Check]:
    reports = signed_reports(h.net, list(range(max(0, h.first_window - 1), h.last_miner_window + 2)))
    manifests = anchored_manifests(h)
    checks = [
        check_processes(h),
        check_run_completed(h),
        check_validator_state(h),
        *check_miner_reveals(h, manifests),
        check_residual_reports(h, reports, manifests),
        check_fraud(h, reports),
        check_global_model(h, reports),
        *check_store(h),
        *check_disruption(h, "store outage"),
        *check_disruption(h, "S3 server paused"),
        *check_disruption(h, "chain stall"),
        *(outage_costs(h) if h.disruptions else []),
    ]
    covered = {k.phase for k in h.kills}
    missing = [p for p in PHASES if p not in covered]
    pairs = {(k.role, k.phase) for k in h.kills}
    checks.append(
        Check(
            "every phase hit",
            not missing and not h.skipped,
            f"{len(h.kills)} kills hit {', '.join(sorted(covered)) or 'nothing'} ({len(pairs)} role-phase pairs)"
            + (f"; never {', '.join(missing)}" if missing else "")
            + (f"; {len(h.skipped)} planned kill(s) skipped" if h.skipped else ""),
            list(h.skipped),
        )
    )
    return checks
