// A small SVG line chart: axes with round ticks, one line and one point per value, a legend.
// Every label is set as text, never as markup.

const SVG = "http://www.w3.org/2000/svg";
const PAD = { left: 58, right: 16, top: 12, bottom: 34 };

function node(tag, attrs, text) {
  const el = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs || {})) el.setAttribute(k, String(v));
  if (text !== undefined) el.textContent = text;
  return el;
}

// About `count` round numbers spanning [lo, hi].
export function ticks(lo, hi, count) {
  if (!(hi > lo)) return [lo];
  const raw = (hi - lo) / Math.max(1, count);
  const mag = Math.pow(10, Math.floor(Math.log10(raw)));
  const step = [1, 2, 2.5, 5, 10].map((m) => m * mag).find((s) => s >= raw) || raw;
  const out = [];
  for (let v = Math.ceil(lo / step) * step; v <= hi + step * 1e-9; v += step) out.push(Number(v.toPrecision(12)));
  return out;
}

// series: [{name, color, points: [[x, y], ...]}]; options: {height, xTitle, yTitle, xFormat, yFormat,
// integerX, integerY, zero (the y axis starts at 0), step (draw as steps, for values that hold until
// the next sample), legend (even for one series), label, empty (text when there is no data)}
export function lineChart(container, series, options = {}) {
  const H = options.height || 240;
  const W = Math.max(320, Math.round(container.clientWidth || 720));
  const xf = options.xFormat || ((v) => String(v));
  const yf = options.yFormat || ((v) => String(v));
  container.replaceChildren();
  const all = series.flatMap((s) => s.points);
  if (all.length === 0) {
    const p = document.createElement("p");
    p.className = "empty";
    p.textContent = options.empty || "No data yet.";
    container.append(p);
    return;
  }
  let [x0, x1] = [Math.min(...all.map((p) => p[0])), Math.max(...all.map((p) => p[0]))];
  let [y0, y1] = [Math.min(...all.map((p) => p[1])), Math.max(...all.map((p) => p[1]))];
  if (x0 === x1) [x0, x1] = [x0 - 1, x1 + 1];
  if (options.zero) y0 = Math.min(0, y0);
  const floor = options.zero && y0 === 0;
  if (y0 === y1) {
    const pad = Math.abs(y0) * 0.1 || 1;
    y1 += pad;
    if (!floor) y0 -= pad;
  }
  const margin = (y1 - y0) * 0.08;
  if (!floor) y0 -= margin;
  y1 += margin;
  const sx = (x) => PAD.left + ((x - x0) / (x1 - x0)) * (W - PAD.left - PAD.right);
  const sy = (y) => H - PAD.bottom - ((y - y0) / (y1 - y0)) * (H - PAD.top - PAD.bottom);

  const svg = node("svg", { viewBox: `0 0 ${W} ${H}`, role: "img" });
  if (options.label) svg.append(node("title", {}, options.label));
  let yt = ticks(y0, y1, 5);
  if (options.integerY) yt = yt.filter((t) => Number.isInteger(t));
  for (const t of yt) {
    svg.append(node("line", { class: "grid", x1: PAD.left, x2: W - PAD.right, y1: sy(t), y2: sy(t) }));
    svg.append(node("text", { class: "tick", x: PAD.left - 6, y: sy(t) + 4, "text-anchor": "end" }, yf(t)));
  }
  let xt = ticks(x0, x1, 8);
  if (options.integerX) xt = xt.filter((t) => Number.isInteger(t));
  for (const t of xt) {
    svg.append(node("line", { class: "axis", x1: sx(t), x2: sx(t), y1: H - PAD.bottom, y2: H - PAD.bottom + 4 }));
    svg.append(node("text", { class: "tick", x: sx(t), y: H - PAD.bottom + 16, "text-anchor": "middle" }, xf(t)));
  }
  svg.append(node("line", { class: "axis", x1: PAD.left, x2: W - PAD.right, y1: H - PAD.bottom, y2: H - PAD.bottom }));
  svg.append(node("line", { class: "axis", x1: PAD.left, x2: PAD.left, y1: PAD.top, y2: H - PAD.bottom }));
  if (options.xTitle) svg.append(node("text", { class: "title", x: W - PAD.right, y: H - 4, "text-anchor": "end" }, options.xTitle));
  if (options.yTitle) svg.append(node("text", { class: "title", x: 4, y: PAD.top + 2, "dominant-baseline": "hanging" }, options.yTitle));

  for (const s of series) {
    const pts = [...s.points].sort((a, b) => a[0] - b[0]);
    if (pts.length === 0) continue;
    let d = "";
    pts.forEach(([x, y], i) => {
      if (i === 0) d += `M${sx(x)},${sy(y)}`;
      else if (options.step) d += `H${sx(x)}V${sy(y)}`;
      else d += `L${sx(x)},${sy(y)}`;
    });
    const path = node("path", { class: "line", d, stroke: s.color });
    path.dataset.series = s.name;
    svg.append(path);
    for (const [x, y] of pts) {
      const c = node("circle", { class: "point", cx: sx(x), cy: sy(y), r: pts.length > 60 ? 2 : 3.5, fill: s.color });
      c.dataset.series = s.name;
      c.append(node("title", {}, `${s.name}: ${yf(y)} at ${xf(x)}`));
      svg.append(c);
    }
  }
  container.append(svg);
  if (series.length > 1 || options.legend) {
    const legend = document.createElement("div");
    legend.className = "legend";
    for (const s of series) {
      const item = document.createElement("span");
      const swatch = document.createElement("span");
      swatch.className = "swatch";
      swatch.style.background = s.color;
      item.append(swatch, document.createTextNode(s.name));
      legend.append(item);
    }
    container.append(legend);
  }
}
