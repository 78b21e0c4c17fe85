// "Now": what is late, what failed and why, and how the last hour went.

import { get } from "./api.js";
import { STATUS_COLOURS, lines, stackedBars } from "./charts.js";
import { badge, h, jobHash, link, replace } from "./dom.js";
import { clock, dateTime, relative, seconds, setServerNow } from "./format.js";

const WINDOW_SECONDS = 3600;
const STATUSES = ["success", "failed", "timeout", "abandoned", "skipped", "running"];

export async function nowView(main) {
  const box = h("div", { class: "now" });
  replace(main, box);
  async function load() {
    const stats = await get(`/v1/stats?window=${WINDOW_SECONDS}`);
    setServerNow(stats.now);
    replace(box, problems(stats), gauges(stats), charts(stats), coverage(stats));
  }
  await load();
  return load;
}

function problems(stats) {
  const section = h("section", { class: "panel attention", "data-testid": "problems" },
    h("h2", {}, "Needs attention"));
  if (!stats.problems.length) {
    section.append(h("p", { class: "ok" }, "No failed, timed-out, abandoned or skipped runs in the last hour."));
    return section;
  }
  const rows = stats.problems.map((run) => h("tr", {},
    h("td", {}, badge(run.status)),
    h("td", {}, link(jobHash(run.job_id), run.job_name)),
    h("td", { class: "nowrap", title: dateTime(run.scheduled_at) }, relative(run.scheduled_at)),
    h("td", { class: "error-text" }, run.error ? `${run.error.type}: ${run.error.message}` : "—")));
  section.append(h("table", { class: "table compact" },
    h("thead", {}, h("tr", {}, h("th", {}, "status"), h("th", {}, "job"), h("th", {}, "scheduled"), h("th", {}, "reason"))),
    h("tbody", {}, rows)));
  return section;
}

function card(label, value, note, tone) {
  return h("div", { class: `card ${tone || ""}` }, h("div", { class: "card-label" }, label),
    h("div", { class: "card-value" }, value), h("div", { class: "card-note" }, note || ""));
}

function gauges(stats) {
  const total = Object.values(stats.totals).reduce((a, b) => a + b, 0);
  const failed = (stats.totals.failed || 0) + (stats.totals.timeout || 0) + (stats.totals.abandoned || 0);
  const busy = stats.busy_workers === null ? "—" : `${stats.busy_workers} / ${stats.workers}`;
  return h("section", { class: "cards" },
    card("Due backlog", String(stats.due_backlog), "jobs due and not yet running", stats.due_backlog > 0 ? "warn" : ""),
    card("Busy workers", busy, stats.busy_workers === null ? "no dispatcher in this process" : "running a task"),
    card("Failed, last hour", String(failed), `of ${total} runs · ${stats.totals.skipped || 0} skipped`, failed ? "bad" : ""),
    card("Fire lag p50", seconds(stats.lag_p50_seconds), "start minus due time"),
    card("Fire lag p99", seconds(stats.lag_p99_seconds), "the slowest 1 %", stats.lag_p99_seconds > 5 ? "warn" : ""));
}

function charts(stats) {
  const labels = stats.buckets.map((b) => clock(b.start));
  return h("section", { class: "charts" },
    stackedBars({ buckets: stats.buckets, statuses: STATUSES, labelOf: (i) => labels[i],
      title: "Executions per minute, by status" }),
    lines({
      title: "Fire lag per minute (p50, p99)", labels, format: seconds,
      series: [
        { label: "p50", colour: "#3b82f6", values: stats.buckets.map((b) => b.lag_p50_seconds) },
        { label: "p99", colour: STATUS_COLOURS.timeout, values: stats.buckets.map((b) => b.lag_p99_seconds) },
      ],
    }));
}

function coverage(stats) {
  const note = stats.truncated
    ? `Only the newest ${stats.executions_read} runs were read: counts are complete from ${dateTime(stats.complete_since)}.`
    : `${stats.executions_read} runs since ${dateTime(stats.complete_since)}; refreshed ${clock(stats.now)}.`;
  return h("p", { class: "muted small" }, note);
}
