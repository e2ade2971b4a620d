"""What the dashboard shows, as plain records built by pure functions from what `reading` found.

Everything a participant wrote (a report's reasons, a refusal's text) reaches these records clipped
to `TEXT_CHARS`; the pages put it on screen as text, never as markup.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from statistics import mean

from distrai.chain.base import Metagraph
from distrai.dashboard.words import explain, refusal_kind, refuted_work, score_words
from distrai.protocol.standing import standing
from distrai.wire.verdicts import Number
from distrai.wire.window_documents import PayStanding, WindowReport

TEXT_CHARS = 400
"""Participant-written text is cut to this many characters for display."""


def clip(text: str, limit: int = TEXT_CHARS) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def finite(x: float | None) -> float | None:
    """`x`, or None where it is not a finite number (JSON has no NaN)."""
    return x if x is not None and math.isfinite(x) else None


@dataclass(frozen=True)
class AggregateCheck:
    """One validator's aggregate of a window, as a follower checks it (all but the recomputation)."""

    validator: str
    accepted: tuple[tuple[str, float], ...] = ()
    """(miner hotkey, weight), in the aggregate's order"""
    result_hash: str | None = None
    problem: str | None = None
    """why a follower refuses it; None when it passes"""
    base_hash: str | None = None
    """the model it was built on (G_w as its validator had it)"""


@dataclass(frozen=True)
class Problem:
    """A document the dashboard could not read or would not show, and why."""

    window: int | None
    who: str
    what: str


@dataclass(frozen=True)
class WindowDocs:
    """Everything read about one window: the validators' signed reports and their aggregates."""

    window: int
    reports: dict[str, WindowReport] = field(default_factory=dict)
    aggregates: dict[str, AggregateCheck] = field(default_factory=dict)
    leader: str | None = None
    """the validator with the most stake whose aggregate passes every check: the one nodes follow"""
    tokens: int | None = None
    """tokens of training in the updates the leader's aggregate took"""
    problems: tuple[Problem, ...] = ()
    settled: bool = False
    """whether the window's aggregate deadline had passed when it was read: no other aggregate can count"""

    def in_leader_aggregate(self, hotkey: str) -> float | None:
        """The weight of `hotkey`'s update in the leader's aggregate, or None when it is not in it."""
        if self.leader is None:
            return None
        return dict(self.aggregates[self.leader].accepted).get(hotkey)


@dataclass(frozen=True)
class ChainState:
    """What the dashboard read from the chain at one refresh."""

    block: int
    metagraph: Metagraph
    weights: dict[int, dict[int, float]]
    """validator uid → miner uid → weight (normalized), as set on chain"""
    owner_hotkey: str

    def validators(self) -> list[str]:
        """Hotkeys holding a validator permit and stake, most stake first."""
        ranked = sorted(
            (n for n in self.metagraph.neurons if n.validator_permit and n.stake > 0),
            key=lambda n: (-n.stake, n.uid),
        )
        return [n.hotkey for n in ranked]

    def miners(self) -> list[str]:
        validators = set(self.validators())
        return [n.hotkey for n in self.metagraph.neurons if n.hotkey not in validators | {self.owner_hotkey}]

    def weight_on(self, uid: int) -> float:
        """The stake-weighted mean of the weights the validators set on `uid`."""
        stake = {n.uid: n.stake for n in self.metagraph.neurons}
        total = sum(stake.get(v, 0.0) for v in self.weights)
        if total <= 0:
            return 0.0
        return sum(stake.get(v, 0.0) * row.get(uid, 0.0) for v, row in self.weights.items()) / total


@dataclass(frozen=True)
class Sample:
    """A miner's standing on chain at one block."""

    block: int
    weight: float
    incentive: float
    earned: float


@dataclass(frozen=True)
class Verdict:
    """One validator's signed verdict on one miner in one window, with what it means."""

    window: int
    validator: str
    validator_label: str
    accepted: bool
    score: float
    reason: str | None
    explanation: str
    how_scored: str
    checks: dict[str, str]
    numbers: dict[str, float]


@dataclass(frozen=True)
class MinerWindow:
    window: int
    in_global_model: bool
    aggregate_weight: float | None
    verdicts: list[Verdict]
    aggregate_followed: bool
    """whether nodes followed an aggregate of this window at all (none, when every one came late or
    was refused)"""
    why_not: str | None
    """why its update is not in the global model (`distrai.protocol.standing`); None when it is"""
    own: str | None = None
    """what the miner's own metrics records say of the window (trained and committed, or lost and
    why); None when the dashboard reads no metrics file of it"""


@dataclass(frozen=True)
class MinerRow:
    hotkey: str
    label: str
    uid: int | None
    windows: int
    """windows a validator reported on it"""
    accepted: int
    """windows whose followed aggregate took its update into the global model"""
    rejected: int
    """windows in which at least one validator's signed report rejected it"""
    last_score: float | None
    mean_score: float | None
    weight: float
    incentive: float
    emission: float
    """emission of the last epoch"""
    earned: float
    """everything earned since registration (embedded chain only; 0 elsewhere)"""
    earned_block: int | None
    """the block `earned` was read at: the chain pays on the last weights set, so it rises while
    the chain runs, nodes or none"""
    utilization: float | None
    bytes_sent: int
    """update and revealed bytes the validators read from it"""
    last_rejection: str | None
    last_rejection_window: int | None
    last_rejection_by: str | None
    pay: PayStanding | None = None
    """where its pay stands at the leading validator, as its newest report says (`validators.pay`)"""
    pay_window: int | None = None
    """the window of that report"""


@dataclass(frozen=True)
class MinerPage:
    row: MinerRow
    summary: list[str]
    windows: list[MinerWindow]
    history: list[Sample]
    stopped: str | None
    """why the network looks stopped (`stopped_note`); None while it runs"""


@dataclass(frozen=True)
class ValidatorRow:
    hotkey: str
    label: str
    uid: int | None
    stake: float
    validator_trust: float
    dividends: float
    earned: float
    earned_block: int | None
    windows_reported: int
    checked: int
    """miners in its latest report"""
    replayed: int
    """miners it replayed in its latest report"""
    replay_steps: int
    replay_seconds: float
    """its verification work over the windows shown"""
    led: int
    """windows whose followed aggregate was its own"""
    agreed: int
    compared: int
    """windows in which its aggregate took the same updates, weights and result as the leader's, of
    those in which both published one"""
    refused: int
    """other validators' aggregates it refused to follow, as its reports name them"""
    findings_adopted: int
    findings_refuted: int
    weights_set: int
    """miners its weights on chain give more than 0"""
    last_update: int | None
    utilization: float | None
    aggregates: int
    """windows in which it anchored an aggregate before the aggregate deadline"""
    aggregate_problem: str | None
    """why followers refuse its latest aggregate, if they do"""
    aggregate_refusal: tuple[str, str] | None = None
    """that refusal in one word (censor, liar, outvoted or refused) and what the word means
    (`words.refusal_kind`)"""
    behind_since: int | None = None
    """the first window of the latest run of windows whose aggregate it built on another model than
    the network's (`behind_since`); None when its latest aggregate was built on the network's"""
    work_refuted: tuple[str, str] | None = None
    """its measurements or replay receipts as other validators' re-checks refuted them, in one word
    and what it means (`words.refuted_work`); None when none was"""


@dataclass(frozen=True)
class WindowRow:
    window: int
    leader: str | None
    leader_label: str | None
    accepted: int
    tokens: int | None
    update_bytes: int
    revealed_bytes: int
    reports: int
    heldout: float | None
    """held-out loss of the global model after this window"""
    settled: bool


@dataclass(frozen=True)
class RunInfo:
    name: str
    run_id: str
    netuid: int
    blocks_per_window: int
    first_window: int | None


@dataclass(frozen=True)
class RunView:
    run: RunInfo
    block: int | None
    window: int | None
    phases: list[str]
    heldout: list[tuple[int, float]]
    windows: list[WindowRow]
    tokens: int
    update_bytes: int
    revealed_bytes: int
    miners: list[MinerRow]
    validators: list[ValidatorRow]
    banners: list[str]
    problems: list[Problem]
    updated: float
    heldout_empty: str
    """what the held-out chart says while it has no point"""
    stopped: str | None
    """why the network looks stopped (`stopped_note`); None while it runs"""


HELDOUT_PENDING = "No window's global model is final yet."
HELDOUT_OFF = "Held-out loss is off for this run: the dashboard was started with --no-heldout."
STOPPED_WINDOWS = 2
"""Windows past their aggregate deadline with no report or aggregate at all, after the last that had
one, before the page says the network has stopped."""


def stopped_note(docs: list[WindowDocs]) -> str | None:
    """Why the network looks stopped: no validator has published a report or an aggregate of the
    last `STOPPED_WINDOWS` windows whose aggregate deadline passed, after windows that had them.
    None while it runs (or before any validator has published)."""
    published = [d.window for d in docs if d.reports or d.aggregates]
    if not published:
        return None
    silent = [d.window for d in docs if d.window > published[-1] and d.settled]
    if len(silent) < STOPPED_WINDOWS:
        return None
    return (
        f"the network has stopped: no validator has published a report or an aggregate since window "
        f"{published[-1]} (windows {silent[0]}–{silent[-1]} passed their aggregate deadline without one)"
    )


def label_of(hotkey: str, labels: dict[str, str]) -> str:
    return labels.get(hotkey) or f"{hotkey[:8]}…"


def verdicts_of(docs: list[WindowDocs], hotkey: str, labels: dict[str, str]) -> list[Verdict]:
    """Every validator's verdict on `hotkey`, window by window, in the order of `docs`."""
    out = []
    for d in docs:
        for validator, report in d.reports.items():
            entry = report.miners.get(hotkey)
            if entry is None:
                continue
            out.append(
                Verdict(
                    window=d.window,
                    validator=validator,
                    validator_label=label_of(validator, labels),
                    accepted=entry.reason is None,
                    score=entry.score,
                    reason=None if entry.reason is None else clip(entry.reason),
                    explanation=clip(explain(entry.verdicts), 2 * TEXT_CHARS),
                    how_scored=score_words(entry.numbers),
                    checks={clip(k, 64): clip(v) for k, v in entry.verdicts.items()},
                    numbers=dict(entry.numbers),
                )
            )
    return out


def _window_bytes(d: WindowDocs, hotkey: str, name: str) -> int:
    """The most any validator read of `hotkey`'s `name` bytes in window `d`: one upload, read by many."""
    values = [r.miners[hotkey].numbers.get(name, 0.0) for r in d.reports.values() if hotkey in r.miners]
    return int(max(values, default=0.0))


def leader_scores(docs: list[WindowDocs], hotkey: str) -> list[float]:
    """`hotkey`'s score in each window's leading report (the validator followed, else the first)."""
    scores = []
    for d in docs:
        report = d.reports.get(d.leader) if d.leader else next(iter(d.reports.values()), None)
        if report is not None and hotkey in report.miners:
            scores.append(report.miners[hotkey].score)
    return scores


def pay_of(docs: list[WindowDocs], hotkey: str) -> tuple[PayStanding | None, int | None]:
    """Where `hotkey`'s pay stands in the newest report that says so, the window's leader's first,
    and that report's window."""
    for d in sorted(docs, key=lambda d: -d.window):
        ordered = ([d.leader] if d.leader in d.reports else []) + sorted(d.reports)
        for validator in ordered:
            entry = d.reports[validator].miners.get(hotkey)
            if entry is not None and entry.pay is not None:
                return entry.pay, d.window
    return None, None


def miner_row(
    hotkey: str,
    docs: list[WindowDocs],
    chain: ChainState | None,
    labels: dict[str, str],
    utilization: dict[str, float | None],
) -> MinerRow:
    verdicts = verdicts_of(docs, hotkey, labels)
    rejections = [v for v in verdicts if not v.accepted]
    last = rejections[-1] if rejections else None
    scores = leader_scores(docs, hotkey)
    neuron = chain.metagraph.neuron(hotkey) if chain else None
    pay, pay_window = pay_of(docs, hotkey)
    return MinerRow(
        hotkey=hotkey,
        label=label_of(hotkey, labels),
        uid=neuron.uid if neuron else None,
        windows=len({v.window for v in verdicts}),
        accepted=sum(1 for d in docs if d.in_leader_aggregate(hotkey) is not None),
        rejected=len({v.window for v in rejections}),
        last_score=scores[-1] if scores else None,
        mean_score=mean(scores) if scores else None,
        weight=chain.weight_on(neuron.uid) if chain and neuron else 0.0,
        incentive=neuron.incentive if neuron else 0.0,
        emission=neuron.emission if neuron else 0.0,
        earned=neuron.total_emission if neuron else 0.0,
        earned_block=chain.block if chain else None,
        utilization=utilization.get(hotkey),
        bytes_sent=sum(
            _window_bytes(d, hotkey, Number.UPDATE_BYTES) + _window_bytes(d, hotkey, Number.REVEALED_BYTES)
            for d in docs
        ),
        last_rejection=last.reason if last else None,
        last_rejection_window=last.window if last else None,
        last_rejection_by=last.validator_label if last else None,
        pay=pay,
        pay_window=pay_window,
    )


NOT_SETTLED = "the window's aggregate deadline has not passed yet"


def why_not_taken(d: WindowDocs, hotkey: str, top_n: int) -> str | None:
    """Why `hotkey`'s update of window `d` is not in the global model, as the miner's log says it
    (`distrai.protocol.standing`); None when it is."""
    if not d.settled:
        return NOT_SETTLED
    accepted = d.aggregates[d.leader].accepted if d.leader else ()
    reason = standing(hotkey, d.window, d.reports, d.leader, accepted, top_n).reason
    return None if reason is None else clip(reason)


def miner_page(
    row: MinerRow,
    docs: list[WindowDocs],
    labels: dict[str, str],
    history: list[Sample],
    top_n: int,
    own: Mapping[int, str] | None = None,
) -> MinerPage:
    """`top_n`: the run's `scoring.aggregate_top_n`; `own`: window → what the miner's own metrics
    records say of it (`distrai.dashboard.nodes.own_windows`), so that a window no validator's report
    covers (dropped, skipped, its reveal lost to a restart) is listed too."""
    own = own or {}
    verdicts = verdicts_of(docs, row.hotkey, labels)
    windows = []
    for d in reversed(docs):
        mine = [v for v in verdicts if v.window == d.window]
        weight = d.in_leader_aggregate(row.hotkey)
        if mine or weight is not None or d.window in own:
            windows.append(
                MinerWindow(
                    d.window,
                    weight is not None,
                    weight,
                    mine,
                    d.leader is not None,
                    why_not_taken(d, row.hotkey, top_n),
                    own.get(d.window),
                )
            )
    return MinerPage(
        row=row,
        summary=miner_summary(row, verdicts),
        windows=windows,
        history=history,
        stopped=stopped_note(docs),
    )


def miner_summary(row: MinerRow, verdicts: list[Verdict]) -> list[str]:
    """A few sentences a miner reads first: where its work went, why it was turned down, what it earns."""
    if not verdicts:
        return [
            "No validator has reported on this hotkey in the windows shown: it has not committed an update "
            "on chain before a commit deadline, or the validators have not checked its window yet."
        ]
    rejected = f"at least one validator rejected it in {row.rejected}" if row.rejected else "none rejected it"
    lines = [
        f"Validators reported on {row.windows} window(s); the global model took your update in "
        f"{row.accepted}, and {rejected}."
    ]
    if row.last_rejection:
        lines.append(
            f"Latest rejection: window {row.last_rejection_window}, by {row.last_rejection_by}: {row.last_rejection}"
        )
    if row.mean_score is not None:
        lines.append(
            f"Your mean score from the leading validator is {row.mean_score:,.0f}: the tokens your manifests "
            "claim, for an update that lowers the loss of the sequences it was trained on."
        )
    if row.pay is not None:
        lines.append(pay_words(row.pay, row.pay_window))
    lines.append(
        f"On chain now: weight {row.weight:.3f} (stake-weighted over the validators), incentive "
        f"{row.incentive:.3f}, emission {row.emission:.4f} per epoch"
        + (f", {row.earned:.4f} earned in all as of block {row.earned_block}." if row.earned else ".")
    )
    return lines


def pay_words(pay: PayStanding, window: int | None) -> str:
    """What a miner's pay standing means, in a sentence or two (docs/protocol.md, "Pay that matures")."""
    text = (
        f"After window {window}: matured pay {pay.average:,.0f} tokens a window (the moving average your "
        f"weight follows); pending {pay.pending:,.0f} tokens"
    )
    if pay.matures_at is not None:
        text += f", the oldest maturing at window {pay.matures_at}"
    text += (
        ". A window's score is paid only once it has been open to challenge; a catch before then forfeits it."
    )
    if pay.held:
        text += " Paid nothing for now: a withheld reveal is read again before anything matures."
    return text


def validator_row(
    hotkey: str,
    docs: list[WindowDocs],
    chain: ChainState | None,
    labels: dict[str, str],
    utilization: dict[str, float | None],
) -> ValidatorRow:
    reports = [d.reports[hotkey] for d in docs if hotkey in d.reports]
    latest = reports[-1] if reports else None
    entries = [e for r in reports for e in r.miners.values()]
    compared = agreed = 0
    for d in docs:
        mine, lead = d.aggregates.get(hotkey), d.aggregates.get(d.leader) if d.leader else None
        if mine is None or lead is None or mine.problem is not None:
            continue
        compared += 1
        agreed += mine.accepted == lead.accepted and mine.result_hash == lead.result_hash
    neuron = chain.metagraph.neuron(hotkey) if chain else None
    weights = chain.weights.get(neuron.uid, {}) if chain and neuron else {}
    latest_aggregate = next((d.aggregates[hotkey] for d in reversed(docs) if hotkey in d.aggregates), None)
    rechecks = [c for r in reports for c in r.rechecks]
    return ValidatorRow(
        hotkey=hotkey,
        label=label_of(hotkey, labels),
        uid=neuron.uid if neuron else None,
        stake=neuron.stake if neuron else 0.0,
        validator_trust=neuron.validator_trust if neuron else 0.0,
        dividends=neuron.dividends if neuron else 0.0,
        earned=neuron.total_emission if neuron else 0.0,
        earned_block=chain.block if chain else None,
        windows_reported=len(reports),
        checked=len(latest.miners) if latest else 0,
        replayed=sum(1 for e in latest.miners.values() if Number.REPLAY_STEPS in e.numbers) if latest else 0,
        replay_steps=int(sum(e.numbers.get(Number.REPLAY_STEPS, 0.0) for e in entries)),
        replay_seconds=sum(e.numbers.get(Number.REPLAY_SECONDS, 0.0) for e in entries),
        led=sum(1 for d in docs if d.leader == hotkey),
        agreed=agreed,
        compared=compared,
        refused=sum(len(r.refused) for r in reports),
        findings_adopted=sum(1 for c in rechecks if c.outcome == "adopted"),
        findings_refuted=sum(1 for c in rechecks if c.outcome == "refuted"),
        weights_set=sum(1 for w in weights.values() if w > 0),
        last_update=neuron.last_update if neuron else None,
        utilization=utilization.get(hotkey),
        aggregates=sum(1 for d in docs if hotkey in d.aggregates),
        aggregate_problem=latest_aggregate.problem if latest_aggregate else None,
        aggregate_refusal=refusal_kind(latest_aggregate.problem)
        if latest_aggregate and latest_aggregate.problem
        else None,
        behind_since=behind_since(hotkey, docs),
        work_refuted=refuted_work(refutations_of(hotkey, docs, labels)),
    )


def refutations_of(hotkey: str, docs: list[WindowDocs], labels: dict[str, str]) -> list[tuple[str, str, str]]:
    """(what, by whom, why) for each of `hotkey`'s measurements and replay receipts that another
    validator's report refutes, oldest window first."""
    found = []
    for d in docs:
        for other, report in sorted(d.reports.items()):
            checks = [("measurement", c) for c in report.measurement_rechecks] + [
                ("replay receipt", c) for c in report.receipt_rechecks
            ]
            found += [
                (what, label_of(other, labels), c.reason)
                for what, c in checks
                if other != hotkey and c.validator == hotkey and c.outcome == "refuted"
            ]
    return found


def behind_since(hotkey: str, docs: list[WindowDocs]) -> int | None:
    """The first window of the latest run of windows in which `hotkey` built its aggregate on another
    model than the network's: the result of the aggregate followed in the window before, or that
    window's model again when none was followed (the first window shown: the base of its followed
    aggregate). None when its latest aggregate was built on the network's model, or none tells. A
    validator that passed over an aggregate out of reach goes back for it once it sees the others'
    next aggregates (`distrai.protocol.rejoin`); this says how long it was off meanwhile."""
    since, network = None, None
    for d in sorted(docs, key=lambda d: d.window):
        lead = d.aggregates.get(d.leader) if d.leader else None
        expected = network if network is not None else (lead.base_hash if lead else None)
        mine = d.aggregates.get(hotkey)
        if mine is not None and mine.base_hash is not None and expected is not None:
            since = None if mine.base_hash == expected else (d.window if since is None else since)
        network = lead.result_hash if lead else expected
    return since


def window_row(d: WindowDocs, labels: dict[str, str], heldout: dict[int, float]) -> WindowRow:
    miners = {hk for r in d.reports.values() for hk in r.miners}
    return WindowRow(
        window=d.window,
        leader=d.leader,
        leader_label=label_of(d.leader, labels) if d.leader else None,
        accepted=len(d.aggregates[d.leader].accepted) if d.leader else 0,
        tokens=d.tokens,
        update_bytes=sum(_window_bytes(d, hk, Number.UPDATE_BYTES) for hk in miners),
        revealed_bytes=sum(_window_bytes(d, hk, Number.REVEALED_BYTES) for hk in miners),
        reports=len(d.reports),
        heldout=finite(heldout.get(d.window + 1)),
        settled=d.settled,
    )


def run_view(
    run: RunInfo,
    chain: ChainState | None,
    docs: list[WindowDocs],
    heldout: dict[int, float],
    labels: dict[str, str],
    utilization: dict[str, float | None],
    phases: list[str],
    banners: list[str],
    updated: float,
    *,
    heldout_on: bool,
) -> RunView:
    """The whole page: the run, window by window, and every miner and validator. `heldout_on`:
    whether the dashboard follows the held-out loss (off with --no-heldout)."""
    reported = {hk for d in docs for r in d.reports.values() for hk in r.miners}
    reporting = [v for d in docs for v in d.reports]
    validators = list(dict.fromkeys([*(chain.validators() if chain else []), *reporting]))
    miners = list(dict.fromkeys([*(chain.miners() if chain else []), *sorted(reported)]))
    miners = [hk for hk in miners if hk not in validators]
    rows = [window_row(d, labels, heldout) for d in docs]
    return RunView(
        run=run,
        block=chain.block if chain else None,
        window=None if chain is None else chain.block // run.blocks_per_window,
        phases=phases,
        heldout=[(w, loss) for w, loss in sorted(heldout.items()) if finite(loss) is not None],
        windows=rows,
        tokens=sum(r.tokens or 0 for r in rows),
        update_bytes=sum(r.update_bytes for r in rows),
        revealed_bytes=sum(r.revealed_bytes for r in rows),
        miners=[miner_row(hk, docs, chain, labels, utilization) for hk in miners],
        validators=[validator_row(hk, docs, chain, labels, utilization) for hk in validators],
        banners=banners,
        problems=[Problem(p.window, label_of(p.who, labels), p.what) for d in docs for p in d.problems],
        updated=updated,
        heldout_empty=HELDOUT_PENDING if heldout_on else HELDOUT_OFF,
        stopped=stopped_note(docs),
    )
