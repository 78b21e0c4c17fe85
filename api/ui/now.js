// "Now": what is late, what failed and why, and how the last hour went.

import { get } from "./api.js";
import { STATUS_COLOURS, lines, stackedBars } from "./charts.js";
import { errorCell, errorHeadline } from "./dead_letters.js";
import { badge, h, jobHash, link, replace } from "./dom.js";
import { clock, dateTime, relative, seconds, setServerNow, span } from "./format.js";

const WINDOW_SECONDS = 3600;
const STATUSES = ["success", "failed", "timeout", "abandoned", "skipped", "running"];

export async function nowView(main) {
  const box = h("div", { class: "now" });
  replace(main, box);
  async function load() {
    const stats = await get(`/v1/stats?window=${WINDOW_SECONDS}`);
    setServerNow(stats.now);
    // Partial figures say so above them; whole ones, below.
    const counted = coverage(stats);
    replace(box, problems(stats), stats.complete ? null : counted, gauges(stats), charts(stats),
      handlers(stats), stats.complete ? counted : null);
  }
  await load();
  return load;
}

function problems(stats) {
  const a = stats.attention;
  const section = h("section", { class: "panel attention", "data-testid": "problems" },
    h("h2", {}, "Needs attention"));
  const parts = [deadLetters(a), failing(a), late(a), failures(a)].filter(Boolean);
  if (!parts.length) {
    section.append(h("p", { class: "ok" }, "Nothing needs attention: no open dead letters, no failing or late jobs, and no failed, timed-out, abandoned or skipped runs in the last hour."));
    return section;
  }
  section.append(...parts);
  return section;
}

/** "3 of 18": the rows shown of a whole that may be longer. */
function shownOf(shown, total, noun) {
  return shown < total ? `the ${shown} most recent of ${total} ${noun}` : `${total} ${noun}`;
}

function group(title, testid, head, rows) {
  return h("div", { class: "attention-group", "data-testid": testid }, h("h3", {}, title),
    h("table", { class: "table compact" },
      h("thead", {}, h("tr", {}, head.map((t) => h("th", {}, t)))), h("tbody", {}, rows)));
}

/** A job's distinct errors, one a line: the error's type and the first line of its message
 * (the whole of it on hover). */
function errorLines(trouble) {
  return trouble.errors.map((e) => h("div", { class: "error-text", title: e.error ? `${e.error.type}: ${e.error.message}` : null },
    badge(e.status), " ", e.error ? errorHeadline(e.error) : "—"));
}

function deadLetters(a) {
  if (!a.dead_letters_total) return null;
  const jobs = shownOf(a.dead_letters.length, a.dead_letter_jobs, a.dead_letter_jobs === 1 ? "job" : "jobs");
  return group([link("#/dead-letters", `${a.dead_letters_total} open dead ${a.dead_letters_total === 1 ? "letter" : "letters"}`), ` in ${jobs}`], "attention-dead-letters",
    ["job", "open", "newest", "errors"],
    a.dead_letters.map((t) => h("tr", {}, h("td", {}, link(jobHash(t.job_id), t.job_name)), h("td", {}, String(t.count)),
      h("td", { class: "nowrap", title: dateTime(t.newest_at) }, relative(t.newest_at)), h("td", {}, errorLines(t)))));
}

function failing(a) {
  if (!a.failing_total) return null;
  return group(`Failing now: ${shownOf(a.failing.length, a.failing_total, a.failing_total === 1 ? "job" : "jobs")}`, "attention-failing",
    ["job", "failed in a row", "last run", "error"],
    a.failing.map((j) => h("tr", {}, h("td", {}, link(jobHash(j.job_id), j.job_name)), h("td", {}, String(j.consecutive_failures)),
      h("td", { class: "nowrap" }, j.last_status ? [badge(j.last_status), " ", relative(j.last_finished_at)] : "—"),
      j.last_error ? errorCell({ type: "", message: j.last_error }) : h("td", {}, "—"))));
}

function late(a) {
  if (!a.late_total) return null;
  return group(`Late: ${shownOf(a.late.length, a.late_total, a.late_total === 1 ? "job" : "jobs")}`, "attention-late",
    ["job", "handler", "was due", "late by"],
    a.late.map((j) => h("tr", {}, h("td", {}, link(jobHash(j.job_id), j.job_name)), h("td", {}, j.handler),
      h("td", { class: "nowrap", title: dateTime(j.due_at) }, dateTime(j.due_at)), h("td", { class: "nowrap late" }, span(j.late_seconds)))));
}

function failures(a) {
  if (!a.failures.length) return null;
  return group(`Failed, timed out, abandoned or skipped in the last hour: ${shownOf(a.failures.length, a.failure_jobs, a.failure_jobs === 1 ? "job" : "jobs")}`, "attention-failures",
    ["job", "runs", "newest", "errors"],
    a.failures.map((t) => h("tr", {}, h("td", {}, link(jobHash(t.job_id), t.job_name)), h("td", {}, String(t.count)),
      h("td", { class: "nowrap", title: dateTime(t.newest_at) }, relative(t.newest_at)), h("td", {}, errorLines(t)))));
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
    card("Open dead letters", String(stats.open_dead_letters), "failed for good, not yet handled", stats.open_dead_letters ? "bad" : ""),
    card("Fire lag p50", seconds(stats.lag_p50_seconds), "first start minus due time"),
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

const HANDLERS_SHOWN = 12;

/** Runs of the window by handler, those with the most failures first. */
function handlers(stats) {
  const failedOf = (counts) => (counts.failed || 0) + (counts.timeout || 0) + (counts.abandoned || 0);
  const rows = Object.entries(stats.by_handler)
    .map(([name, counts]) => ({ name, counts, runs: Object.values(counts).reduce((a, b) => a + b, 0), failed: failedOf(counts) }))
    .sort((a, b) => b.failed - a.failed || b.runs - a.runs || a.name.localeCompare(b.name));
  if (!rows.length) return null;
  const shown = rows.slice(0, HANDLERS_SHOWN);
  return h("section", { class: "panel", "data-testid": "by-handler" },
    h("h2", {}, rows.length > shown.length ? `Runs by handler (the ${shown.length} of ${rows.length} with the most failures)` : "Runs by handler"),
    h("table", { class: "table compact" },
      h("thead", {}, h("tr", {}, ["handler", "runs", ...STATUSES].map((t) => h("th", {}, t)))),
      h("tbody", {}, shown.map((r) => h("tr", {}, h("td", {}, r.name), h("td", {}, String(r.runs)),
        STATUSES.map((status) => h("td", { class: r.counts[status] ? "" : "muted" }, String(r.counts[status] || 0))))))));
}

/** What the figures count: every run of the window, or, when the store stopped its read at
 * its time limit, only the newest ones, which is said where the figures are. */
function coverage(stats) {
  const total = Object.values(stats.totals).reduce((a, b) => a + b, 0);
  if (!stats.complete) {
    return h("p", { class: "small late", "data-testid": "stats-partial" },
      `Partial figures: only the ${total} runs due since ${dateTime(stats.counted_since)} are counted, as ${stats.partial_reason}; refreshed ${clock(stats.now)}.`);
  }
  const since = new Date(Date.parse(stats.now) - stats.window_seconds * 1000).toISOString();
  return h("p", { class: "muted small" }, `Every one of the ${total} runs due since ${dateTime(since)}; refreshed ${clock(stats.now)}.`);
}
