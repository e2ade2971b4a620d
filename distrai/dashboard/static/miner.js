// A miner's own page: where its work went, every validator's verdict in plain words, its standing.
import { lineChart } from "./chart.js";
import { bytes, dash, el, num, pct, poll, showBanners } from "./common.js";

const $ = (id) => document.getElementById(id);
const COLORS = ["#2563eb", "#c2410c", "#0f766e", "#7c3aed", "#b45309", "#be123c"];
const hotkey = decodeURIComponent(window.location.pathname.split("/").pop());

function card(label, value, sub) {
  return el("div", { class: "card" }, el("div", { class: "label" }, label), el("div", { class: "value" }, value),
    el("div", { class: "sub" }, sub || ""));
}

function verdict(v) {
  const n = v.numbers;
  const facts = [
    n.update_bytes !== undefined ? `update ${bytes(n.update_bytes)}` : null,
    n.revealed_bytes !== undefined ? `revealed ${bytes(n.revealed_bytes)}` : null,
    n.replay_steps !== undefined ? `replayed ${n.replay_steps} steps in ${num(n.replay_seconds, 1)} s` : null,
  ].filter(Boolean);
  return el("div", { class: "verdict" },
    el("span", { class: "who" }, v.validator_label),
    el("span", { class: `badge ${v.accepted ? "good" : "bad"}` }, v.accepted ? "accepted" : "rejected"),
    ` score ${num(v.score, 0)}`,
    v.reason ? el("p", { class: "reason" }, `Reason: ${v.reason}`) : null,
    el("p", {}, v.explanation),
    v.accepted ? el("p", { class: "note" }, v.how_scored) : null,
    facts.length ? el("p", { class: "note" }, facts.join(" · ")) : null,
  );
}

function render(page) {
  const r = page.row;
  document.title = `${r.label} · DisTrAI dashboard`;
  showBanners($("banners"), [], page.stopped ? [page.stopped] : []);
  $("miner-name").textContent = `${r.label}${r.uid === null ? "" : ` (uid ${r.uid})`}`;
  $("miner-hotkey").textContent = r.hotkey;
  $("summary").replaceChildren(...page.summary.map((s) => el("li", {}, s)));
  $("cards").replaceChildren(
    card("Accepted", r.accepted, "windows in the global model"),
    card("Rejected", r.rejected, "windows a validator turned down"),
    card("Mean score", num(r.mean_score, 0), `last ${num(r.last_score, 0)}`),
    card("Matured pay", r.pay ? num(r.pay.average, 0) : dash,
      r.pay ? `tokens a window${r.pay.held ? " · held: a withheld reveal is read again" : ""}: what your weight follows` : "no report says yet"),
    card("Pending pay", r.pay ? num(r.pay.pending, 0) : dash,
      r.pay && r.pay.matures_at !== null ? `tokens · the oldest matures at window ${r.pay.matures_at}; forfeited if caught first` : "tokens not yet matured"),
    card("Weight", num(r.weight), `incentive ${num(r.incentive)}`),
    card("Earned", num(r.earned, 3), `at block ${r.earned_block ?? dash} · ${num(r.emission, 4)} last epoch`),
    card("Utilization", pct(r.utilization), r.utilization === null ? "from your node's metrics, when given" : "training time over wall time"),
    card("Bytes sent", bytes(r.bytes_sent), "updates and reveals the validators read"),
  );
  const byValidator = new Map();
  for (const w of page.windows) {
    for (const v of w.verdicts) {
      if (!byValidator.has(v.validator_label)) byValidator.set(v.validator_label, []);
      byValidator.get(v.validator_label).push([v.window, v.score]);
    }
  }
  lineChart($("score-chart"), [...byValidator].map(([name, points], i) => ({ name, points, color: COLORS[i % COLORS.length] })), {
    integerX: true, zero: true, xTitle: "window", yFormat: (y) => y.toFixed(2), legend: true,
    label: "score by window", empty: "No validator has scored this miner yet.",
  });
  lineChart($("chain-chart"), [
    { name: "weight", color: "#2563eb", points: page.history.map((s) => [s.block, s.weight]) },
    { name: "incentive", color: "#15803d", points: page.history.map((s) => [s.block, s.incentive]) },
  ], { step: true, zero: true, integerX: true, xTitle: "block", yFormat: (y) => y.toFixed(2), label: "weight and incentive", empty: "No sample yet." });
  lineChart($("earned-chart"), [{ name: "earned", color: "#b45309", points: page.history.map((s) => [s.block, s.earned]) }], {
    step: true, zero: true, integerX: true, xTitle: "block", yFormat: (y) => y.toFixed(2), height: 180,
    label: "emission earned", empty: "No sample yet.",
  });
  $("windows").replaceChildren(
    ...(page.windows.length ? page.windows.map((w) => el("div", { class: "window" },
      el("h3", {}, `Window ${w.window}`, w.in_global_model
        ? el("span", { class: "badge good" }, `in the global model, weight ${num(w.aggregate_weight)}`)
        : el("span", { class: "badge neutral" }, `not in the global model: ${w.why_not}`)),
      w.own ? el("p", { class: "note" }, `This miner's own log: ${w.own}.`) : null,
      w.verdicts.length ? w.verdicts.map(verdict) : el("p", { class: "note" }, "No validator report names this miner in this window."),
    )) : [el("p", { class: "empty" }, "No window names this miner yet.")]),
  );
  $("meanings").replaceChildren(...Object.entries(page.checks).flatMap(([k, v]) => [el("dt", {}, k), el("dd", {}, `passes when ${v}`)]));
}

$("miner-hotkey").textContent = hotkey;
poll(`/api/miner/${encodeURIComponent(hotkey)}`, render, $("banners"));
