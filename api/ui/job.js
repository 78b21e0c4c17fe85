// A job's page: its definition, next fire times, recent runs (with a chart of duration and lag),
// retry for the failed ones, and who changed what.

import { get, post } from "./api.js";
import { STATUS_COLOURS, lines } from "./charts.js";
import { scheduleAsWritten, scheduleInWords } from "./cron.js";
import { deadLettersHash } from "./dead_letters.js";
import { badge, h, jobHash, replace } from "./dom.js";
import { clock, dateTime, lagSeconds, millis, relative, seconds, setJobZone } from "./format.js";
import { jobActions } from "./jobs.js";
import { notify } from "./notify.js";
import { runHash } from "./run.js";
import { canChange } from "./session.js";

const RETRYABLE = ["failed", "timeout", "abandoned"];
const RUNS_SHOWN = 100;
const RUNS_CHARTED = 50;

export async function jobView(main, id) {
  const path = `/v1/jobs/${encodeURIComponent(id)}`;
  const box = h("div", { class: "job" });
  replace(main, box);
  async function load() {
    const [job, runs, history, preview] = await Promise.all([
      get(path), get(`${path}/executions?limit=${RUNS_SHOWN}`),
      get(`${path}/history?limit=50`), get(`${path}/preview?count=5`),
    ]);
    setJobZone(job.schedule.timezone);
    replace(box, header(job, load), h("div", { class: "columns" },
      h("div", {}, details(job), upcoming(preview)),
      h("div", {}, chart(runs.items))),
    executions(job, runs.items, load), changes(history.items));
  }
  await load();
  return load;
}

function header(job, reload) {
  return h("section", { class: "job-head" },
    h("div", {},
      h("a", { href: "#/jobs", class: "muted small" }, "← all jobs"),
      h("h1", {}, job.name, " ", job.enabled ? h("span", { class: "pill on" }, "enabled") : h("span", { class: "pill off" }, "paused")),
      h("p", { class: "muted" }, `${job.handler} · ${scheduleInWords(job.schedule)}`,
        job.paused_reason ? ` · ${job.paused_reason}` : "")),
    h("div", { class: "actions" }, canChange(job)
      ? [jobActions(job, reload), h("a", { class: "button", href: `${jobHash(job.id)}/edit` }, "Edit")] : null));
}

function dl(pairs) {
  return h("dl", { class: "facts" }, pairs.map(([term, value]) => [h("dt", {}, term), h("dd", {}, value)]));
}

function details(job) {
  return h("section", { class: "panel" }, h("h2", {}, "Definition"), dl([
    ["schedule", h("code", {}, scheduleAsWritten(job.schedule))],
    ["next run", job.enabled && job.next_run_at ? `${dateTime(job.next_run_at)} (${relative(job.next_run_at)})` : "—"],
    ["timeout", seconds(job.timeout_seconds)],
    ["retries", String(job.max_retries)],
    ["shards", job.shards > 1 ? `${job.shards} (each occurrence runs as ${job.shards} executions)` : "1"],
    ["priority", job.priority],
    ["misfire", `${job.misfire.policy}, grace ${seconds(job.misfire.grace_seconds)}`],
    ["failures in a row", String(job.consecutive_failures)],
    ["revision", String(job.revision)],
    ["params", h("pre", { class: "params" }, JSON.stringify(job.params, null, 2))],
  ]));
}

function upcoming(preview) {
  return h("section", { class: "panel" }, h("h2", {}, "Next fire times"), previewList(preview.times));
}

export function previewList(times) {
  if (!times.length) return h("p", { class: "muted" }, "It does not fire again.");
  return h("ol", { class: "fire-times", "data-testid": "fire-times" }, times.map((t) => h("li", {},
    h("span", {}, dateTime(t.at)),
    t.dst_transition ? h("span", { class: "tag dst", title: "the UTC offset changes before this run" }, "DST change") : null)));
}

function chart(runs) {
  const recent = runs.slice(0, RUNS_CHARTED).reverse();
  return lines({
    title: `Duration and fire lag, last ${recent.length} runs`,
    labels: recent.map((run) => clock(run.scheduled_at)),
    format: seconds,
    series: [
      { label: "duration", colour: STATUS_COLOURS.success, values: recent.map((r) => (r.duration_ms === null ? null : r.duration_ms / 1000)) },
      { label: "lag", colour: STATUS_COLOURS.timeout, values: recent.map(lagSeconds) },
    ],
  });
}

function executions(job, runs, reload) {
  const rows = runs.map((run) => h("tr", { "data-status": run.status },
    h("td", {}, badge(run.status)),
    h("td", { class: "nowrap" }, h("a", { href: runHash(run.id), title: "this run's attempts, result and shards" }, dateTime(run.scheduled_at))),
    h("td", { class: "nowrap" }, dateTime(run.started_at)),
    h("td", { class: "num" }, seconds(lagSeconds(run))),
    h("td", { class: "num" }, millis(run.duration_ms)),
    h("td", { class: "num" }, String(run.attempts)),
    h("td", { class: "num nowrap" }, run.shards > 1 ? `${run.shard + 1} of ${run.shards}` : ""),
    h("td", { class: "error-text" }, run.error ? `${run.error.type}: ${run.error.message}` : ""),
    h("td", {}, RETRYABLE.includes(run.status) && canChange(job) ? retryButton(run, reload) : null)));
  return h("section", { class: "panel" }, h("h2", {}, "Executions",
    h("a", { class: "small heading-link", href: deadLettersHash({ job_id: job.id }) }, "dead letters")),
    h("div", { class: "table-wrap" }, h("table", { class: "table", "data-testid": "executions" },
      h("thead", {}, h("tr", {}, ["status", "scheduled", "started", "lag", "duration", "attempts", "shard", "error", ""].map((t) => h("th", {}, t)))),
      h("tbody", {}, rows.length ? rows : h("tr", {}, h("td", { colspan: 9, class: "muted" }, "No runs yet."))))));
}

function retryButton(run, reload) {
  return h("button", { type: "button", onclick: async (event) => {
    event.target.disabled = true;
    try {
      await post(`/v1/executions/${encodeURIComponent(run.id)}/retry`, {});
      notify("Retry queued");
      await reload();
    } catch (err) {
      notify(err.message, "error");
      event.target.disabled = false;
    }
  } }, "Retry");
}

function changes(history) {
  const rows = history.map((change) => h("tr", {},
    h("td", { class: "nowrap" }, dateTime(change.at)),
    h("td", {}, change.actor),
    h("td", {}, change.action),
    h("td", {}, h("code", { class: "small changes" }, summarise(change.changes)))));
  return h("section", { class: "panel" }, h("h2", {}, "History"),
    h("table", { class: "table compact", "data-testid": "history" },
      h("thead", {}, h("tr", {}, ["when", "who", "what", "changes"].map((t) => h("th", {}, t)))),
      h("tbody", {}, rows)));
}

function summarise(changes) {
  return Object.entries(changes).map(([field, change]) => {
    if (change && typeof change === "object" && "from" in change && "to" in change) {
      return `${field}: ${JSON.stringify(change.from)} → ${JSON.stringify(change.to)}`;
    }
    return `${field}: ${JSON.stringify(change)}`;
  }).join("\n");
}
