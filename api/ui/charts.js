// Two small chart kinds drawn as inline SVG: stacked bars (executions per minute by status) and
// lines (fire lag, duration). The SVG scales to its container; labels are text nodes.

import { h, s } from "./dom.js";

const W = 640;
const H = 180;
const PAD = { left: 58, right: 10, top: 10, bottom: 22 };

export const STATUS_COLOURS = {
  success: "#2f9e5b", failed: "#d64545", timeout: "#e8843b",
  abandoned: "#9b59b6", skipped: "#9aa3ad", running: "#3b82f6", cancelled: "#6b7280",
};

function niceMax(value) {
  if (!(value > 0)) return 1;
  const power = 10 ** Math.floor(Math.log10(value));
  const scaled = value / power;
  const nice = scaled <= 1 ? 1 : scaled <= 2 ? 2 : scaled <= 5 ? 5 : 10;
  return nice * power;
}

function frame(max, format, xLabels, title) {
  const svg = s("svg", { viewBox: `0 0 ${W} ${H}`, class: "chart", role: "img", "aria-label": title });
  const bottom = H - PAD.bottom;
  for (const fraction of [0, 0.5, 1]) {
    const y = bottom - fraction * (bottom - PAD.top);
    svg.append(
      s("line", { x1: PAD.left, x2: W - PAD.right, y1: y, y2: y, class: "grid" }),
      s("text", { x: PAD.left - 6, y: y + 4, class: "axis", "text-anchor": "end" }, format(max * fraction)),
    );
  }
  xLabels.forEach(([x, label], i) => {
    const anchor = i === 0 ? "start" : i === xLabels.length - 1 ? "end" : "middle";
    svg.append(s("text", { x, y: H - 6, class: "axis", "text-anchor": anchor }, label));
  });
  return svg;
}

function xOf(i, n) {
  const inner = W - PAD.left - PAD.right;
  return PAD.left + (n <= 1 ? inner / 2 : (i * inner) / (n - 1));
}

function yOf(value, max) {
  const bottom = H - PAD.bottom;
  return bottom - (value / max) * (bottom - PAD.top);
}

function legend(entries) {
  return h("div", { class: "legend" }, entries.map(([label, colour]) => h("span", { class: "key" },
    s("svg", { class: "swatch", viewBox: "0 0 10 10", width: 10, height: 10 },
      s("rect", { width: 10, height: 10, rx: 2, fill: colour })),
    label)));
}

/** Stacked bars: one per bucket, one segment per status. */
export function stackedBars({ buckets, statuses, labelOf, title }) {
  const totals = buckets.map((b) => statuses.reduce((sum, st) => sum + (b.counts[st] || 0), 0));
  const max = niceMax(Math.max(0, ...totals));
  const n = buckets.length;
  const inner = W - PAD.left - PAD.right;
  const slot = inner / Math.max(n, 1);
  const ticks = n ? [[PAD.left, labelOf(0)], [PAD.left + inner / 2, labelOf(Math.floor(n / 2))],
    [W - PAD.right, labelOf(n - 1)]] : [];
  const svg = frame(max, (v) => String(Math.round(v)), ticks, title);
  buckets.forEach((bucket, i) => {
    let y = H - PAD.bottom;
    for (const status of statuses) {
      const count = bucket.counts[status] || 0;
      if (!count) continue;
      const height = yOf(0, max) - yOf(count, max);
      y -= height;
      svg.append(s("rect", {
        x: PAD.left + i * slot + slot * 0.12, y, width: Math.max(1, slot * 0.76), height,
        fill: STATUS_COLOURS[status] || "#777",
      }, s("title", {}, `${labelOf(i)}: ${count} ${status}`)));
    }
  });
  const used = statuses.filter((st) => buckets.some((b) => b.counts[st]));
  return h("figure", { class: "chart-box" }, h("figcaption", {}, title), svg,
    legend(used.map((st) => [st, STATUS_COLOURS[st]])));
}

/** Lines: `series` is [{label, colour, values}] with values aligned to `labels`; null is a gap. */
export function lines({ series, labels, title, format }) {
  const all = series.flatMap((line) => line.values).filter((v) => v !== null && v !== undefined);
  const max = niceMax(Math.max(0, ...all));
  const n = labels.length;
  // First, middle and last label, each once (two runs have no middle).
  const tickAt = [...new Set([0, Math.floor((n - 1) / 2), n - 1])].filter((i) => i >= 0 && (i === 0 || i === n - 1 || n > 4));
  const svg = frame(max, format, tickAt.map((i) => [xOf(i, n), labels[i]]), title);
  for (const line of series) {
    let path = "";
    let pen = false;
    line.values.forEach((value, i) => {
      if (value === null || value === undefined) { pen = false; return; }
      path += `${pen ? "L" : "M"}${xOf(i, n).toFixed(1)},${yOf(value, max).toFixed(1)}`;
      pen = true;
      svg.append(s("circle", { cx: xOf(i, n), cy: yOf(value, max), r: n > 40 ? 1.5 : 2.5, fill: line.colour },
        s("title", {}, `${labels[i]}: ${line.label} ${format(value)}`)));
    });
    if (path) svg.prepend(s("path", { d: path, fill: "none", stroke: line.colour, "stroke-width": 2 }));
  }
  // Grid and axes first, lines over them.
  for (const grid of [...svg.querySelectorAll(".grid, .axis")]) svg.prepend(grid);
  if (!all.length) svg.append(s("text", { x: W / 2, y: H / 2, class: "empty", "text-anchor": "middle" }, "no runs"));
  return h("figure", { class: "chart-box" }, h("figcaption", {}, title), svg,
    legend(series.map((line) => [line.label, line.colour])));
}
