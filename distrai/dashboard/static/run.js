// The run page: summary, held-out loss, bytes, miners, validators and windows, refreshed live.
import { lineChart } from "./chart.js";
import { bytes, count, dash, el, num, pct, poll, shortKey, showBanners, table } from "./common.js";

const $ = (id) => document.getElementById(id);

function card(label, value, sub) {
  return el("div", { class: "card" }, el("div", { class: "label" }, label), el("div", { class: "value" }, value),
    el("div", { class: "sub" }, sub || ""));
}

function who(label, hotkey, href) {
  return [href ? el("a", { href }, label) : el("span", {}, label), " ", el("span", { class: "hk" }, shortKey(hotkey))];
}

function summary(v) {
  const loss = v.heldout;
  const lead = [...v.windows].reverse().find((w) => w.leader_label);
  $("summary").replaceChildren(
    card("Window", v.window ?? dash, v.stopped
      ? `the network has stopped (block ${v.block})`
      : [v.phases.join(" · "), v.block === null ? "" : ` (block ${v.block})`].join("")),
    card("Held-out loss", loss.length ? num(loss[loss.length - 1][1]) : dash,
      loss.length > 1 ? `from ${num(loss[0][1])} at window ${loss[0][0]}` : "the global model, window by window"),
    card("Tokens trained", count(v.tokens), `in the updates the global model took, ${v.windows.length} windows shown`),
    card("Bytes moved", bytes(v.update_bytes + v.revealed_bytes),
      `updates ${bytes(v.update_bytes)} · with verification +${bytes(v.revealed_bytes)}`),
    card("Miners", v.miners.length, lead ? `${lead.accepted} updates in window ${lead.window}'s aggregate` : "no aggregate yet"),
    card("Validators", v.validators.length, lead ? `window ${lead.window} followed ${lead.leader_label}` : "no aggregate followed yet"),
  );
}

// What the chain had paid at the block it was read at: it keeps paying on the last weights set.
function earned(row) {
  return [num(row.earned, 3), " ", el("span", { class: "note" }, row.earned_block === null ? "" : `(block ${row.earned_block})`)];
}

const minerColumns = [
  { title: "Miner", cell: (m) => who(m.label, m.hotkey, `/miner/${encodeURIComponent(m.hotkey)}`) },
  { title: "UID", cell: (m) => m.uid ?? dash },
  { title: "Accepted", cell: (m) => m.accepted },
  { title: "Rejected", cell: (m) => (m.rejected ? el("span", { class: "badge bad" }, m.rejected) : "0") },
  { title: "Score last / mean", cell: (m) => `${num(m.last_score, 0)} / ${num(m.mean_score, 0)}` },
  { title: "Weight", cell: (m) => num(m.weight) },
  { title: "Incentive", cell: (m) => num(m.incentive) },
  { title: "Earned", cell: (m) => earned(m) },
  { title: "Utilization", cell: (m) => pct(m.utilization) },
  { title: "Bytes sent", cell: (m) => bytes(m.bytes_sent) },
  {
    title: "Last rejection", cls: "text",
    cell: (m) => (m.last_rejection
      ? [el("span", { class: "note" }, `window ${m.last_rejection_window}, ${m.last_rejection_by}: `), m.last_rejection]
      : dash),
  },
];

const validatorColumns = [
  {
    title: "Validator",
    cell: (x) => [
      who(x.label, x.hotkey),
      x.behind_since !== null && x.behind_since !== undefined
        ? [
            " ",
            el(
              "span",
              {
                class: "badge bad",
                title:
                  "its aggregates are built on another model than the network's: it passed over an aggregate out " +
                  "of reach, and does not judge miners trained on the network's model until it rejoins",
              },
              `behind since window ${x.behind_since}`,
            ),
          ]
        : null,
    ],
  },
  { title: "UID", cell: (x) => x.uid ?? dash },
  { title: "Stake", cell: (x) => num(x.stake, 0) },
  { title: "V-trust", cell: (x) => num(x.validator_trust) },
  { title: "Reports", cell: (x) => x.windows_reported },
  { title: "Checked / replayed", cell: (x) => `${x.checked} / ${x.replayed}` },
  { title: "Verification work", cell: (x) => `${x.replay_steps} steps, ${num(x.replay_seconds, 1)} s` },
  { title: "Agreement", cell: (x) => (x.compared ? `${x.agreed} of ${x.compared}` : dash) },
  { title: "Led", cell: (x) => x.led },
  { title: "Refused", cell: (x) => x.refused },
  { title: "Findings adopted / refuted", cell: (x) => `${x.findings_adopted} / ${x.findings_refuted}` },
  {
    title: "Its own work",
    cell: (x) =>
      x.work_refuted
        ? el("span", { class: "badge bad", title: x.work_refuted[1] }, x.work_refuted[0])
        : "not refuted",
  },
  { title: "Weights set", cell: (x) => (x.weights_set ? `${x.weights_set} (block ${x.last_update})` : dash) },
  { title: "Earned", cell: (x) => earned(x) },
  { title: "Utilization", cell: (x) => pct(x.utilization) },
  {
    title: "Aggregates in time",
    cell: (x) => [
      `${x.aggregates} of ${x.windows_reported}`,
      x.aggregate_refusal
        ? [
            " ",
            el(
              "span",
              { class: "badge bad", title: `${x.aggregate_refusal[1]}: ${x.aggregate_problem}` },
              x.aggregate_refusal[0],
            ),
          ]
        : null,
    ],
  },
];

const windowColumns = [
  { title: "Window", cell: (w) => w.window },
  { title: "Followed aggregate", cls: "text", cell: (w) => w.leader_label || (w.settled ? "none" : "not yet") },
  { title: "Updates taken", cell: (w) => w.accepted },
  { title: "Tokens", cell: (w) => count(w.tokens) },
  { title: "Update bytes", cell: (w) => bytes(w.update_bytes) },
  { title: "Revealed bytes", cell: (w) => bytes(w.revealed_bytes) },
  { title: "Reports", cell: (w) => w.reports },
  { title: "Held-out loss after", cell: (w) => num(w.heldout) },
];

function render(v) {
  $("run-name").replaceChildren("run ", el("b", {}, v.run.name), ` · subnet ${v.run.netuid} · id ${v.run.run_id.slice(0, 12)}…`);
  showBanners($("banners"), v.banners, v.stopped ? [v.stopped] : []);
  summary(v);
  lineChart($("loss-chart"), [{ name: "held-out loss", color: "#2563eb", points: v.heldout }], {
    integerX: true, xTitle: "window", yTitle: "loss", yFormat: (y) => y.toFixed(2),
    label: "held-out loss by window", empty: v.heldout_empty,
  });
  lineChart($("bytes-chart"), [
    { name: "updates", color: "#0f766e", points: v.windows.map((w) => [w.window, w.update_bytes]) },
    { name: "with verification", color: "#c2410c", points: v.windows.map((w) => [w.window, w.update_bytes + w.revealed_bytes]) },
  ], { integerX: true, integerY: true, zero: true, xTitle: "window", yFormat: bytes, label: "bytes by window", empty: "No reports yet." });
  table($("miners"), minerColumns, v.miners, "No miner is registered yet.");
  table($("validators"), validatorColumns, v.validators, "No validator holds a permit yet.");
  table($("windows"), windowColumns, [...v.windows].reverse(), "No window of this run yet.");
  $("problems-panel").hidden = v.problems.length === 0;
  $("problems").replaceChildren(...v.problems.map((p) => el("li", {}, `window ${p.window} · ${p.who}: ${p.what}`)));
}

poll("/api/run", render, $("banners"));
