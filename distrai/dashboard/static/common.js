// What both pages share: building elements with text only, number formats, and the live poll.

export const POLL_MS = 2000;

// An element with attributes and children; strings become text nodes, never markup.
export function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k === "class") e.className = v;
    else if (k === "href") e.setAttribute("href", v);
    else e.setAttribute(k, String(v));
  }
  for (const c of children.flat(Infinity)) {
    if (c === undefined || c === null) continue;
    e.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return e;
}

export const dash = "—";

export function num(x, digits = 3) {
  return x === null || x === undefined ? dash : Number(x).toFixed(digits);
}

export function pct(x) {
  return x === null || x === undefined ? dash : `${(100 * x).toFixed(0)}%`;
}

export function bytes(n) {
  if (n === null || n === undefined) return dash;
  const units = ["B", "kB", "MB", "GB", "TB"];
  let i = 0;
  while (Math.abs(n) >= 1000 && i < units.length - 1) { n /= 1000; i += 1; }
  return `${n.toFixed(i === 0 ? 0 : 1)} ${units[i]}`;
}

export function count(n) {
  if (n === null || n === undefined) return dash;
  const units = ["", "k", "M", "B", "T"];
  let i = 0;
  while (Math.abs(n) >= 1000 && i < units.length - 1) { n /= 1000; i += 1; }
  return `${n.toFixed(i === 0 ? 0 : 1)}${units[i]}`;
}

export function shortKey(hk) {
  return hk.length > 14 ? `${hk.slice(0, 6)}…${hk.slice(-6)}` : hk;
}

export function table(target, columns, rows, emptyText) {
  const head = el("tr", {}, columns.map((c) => el("th", { class: c.cls }, c.title)));
  const body = rows.length
    ? rows.map((r) => el("tr", {}, columns.map((c) => el("td", { class: c.cls }, c.cell(r)))))
    : [el("tr", {}, el("td", { class: "empty", colspan: columns.length }, emptyText))];
  target.replaceChildren(el("thead", {}, head), el("tbody", {}, body));
}

export function showBanners(target, messages, warnings = []) {
  target.replaceChildren(
    ...messages.map((m) => el("div", { class: "banner", role: "alert" }, m)),
    ...warnings.map((m) => el("div", { class: "banner warn" }, m)),
  );
}

function setLive(state, text) {
  const live = document.getElementById("live");
  live.className = `live ${state}`;
  document.getElementById("live-text").textContent = text;
}

// Fetch `url` now and every POLL_MS; call render(data) when the answer changed. An error answer
// (JSON with "error") or a failed request shows as a banner in `banners` and the poll goes on.
export function poll(url, render, banners) {
  let last = null;
  async function tick() {
    try {
      const response = await fetch(url, { cache: "no-store" });
      const text = await response.text();
      let data;
      try { data = JSON.parse(text); } catch { data = { error: `the dashboard answered ${response.status}` }; }
      if (!response.ok || data.error) {
        showBanners(banners, [data.error || `the dashboard answered ${response.status}`]);
        setLive(response.status === 503 ? "" : "off", response.status === 503 ? "starting…" : "no data");
        last = null;
      } else {
        if (text !== last) render(data);
        last = text;
        const time = new Date().toLocaleTimeString();
        setLive(data.stopped ? "" : "on", data.stopped ? `network stopped · ${time}` : `live · ${time}`);
      }
    } catch (e) {
      setLive("off", "disconnected, retrying");
    }
    setTimeout(tick, POLL_MS);
  }
  tick();
}
