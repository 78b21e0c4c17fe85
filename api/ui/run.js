// One run (#/runs/<execution id>): each attempt with its start, end, error and the backoff
// before the next; the handler's result; the error's traceback; the lines its handler logged;
// and the other shards (and re-runs) of its occurrence side by side. A record written before attempts were logged shows
// what it has: the count of attempts, the run's own start, end and error.

import { get } from "./api.js";
import { badge, h, jobHash, replace } from "./dom.js";
import { dateTime, millis, seconds } from "./format.js";

const OCCURRENCE_RUNS = 200;

export function runHash(id) {
  return `#/runs/${encodeURIComponent(id)}`;
}

export async function runView(main, id) {
  const box = h("div", { class: "run" });
  replace(main, box);
  async function load() {
    const run = await get(`/v1/executions/${encodeURIComponent(id)}`);
    const others = await get(occurrencePath(run));
    replace(box, header(run),
      h("div", { class: "columns" }, facts(run), outcome(run)),
      attempts(run), logLines(run), occurrence(run, others.items));
  }
  await load();
  return load;
}

/** Every run of the run's occurrence: its job's runs scheduled at that very instant. */
function occurrencePath(run) {
  const until = new Date(Date.parse(run.scheduled_at) + 1).toISOString();
  const query = new URLSearchParams({ job_id: run.job_id, since: run.scheduled_at, until, limit: String(OCCURRENCE_RUNS) });
  return `/v1/executions?${query}`;
}

function shardText(run) {
  return run.shards > 1 ? `shard ${run.shard + 1} of ${run.shards}` : "";
}

function header(run) {
  return h("section", { class: "job-head" },
    h("div", {},
      h("a", { href: jobHash(run.job_id), class: "muted small" }, `← ${run.job_name}`),
      h("h1", {}, `Run of ${dateTime(run.scheduled_at)}`, " ", badge(run.status),
        run.dead_letter ? h("a", { class: "pill off", href: `#/dead-letters?job_id=${encodeURIComponent(run.job_id)}` }, `dead letter: ${run.dead_letter}`) : null),
      h("p", { class: "muted" }, [run.handler, shardText(run)].filter(Boolean).join(" · "))));
}

function facts(run) {
  const pairs = [
    ["job", h("a", { href: jobHash(run.job_id) }, run.job_name)],
    ["scheduled", dateTime(run.scheduled_at)],
    ["asked for by", run.requested || "its schedule"],
    ["started", dateTime(run.started_at)],
    ["ended", dateTime(run.finished_at)],
    ["duration", millis(run.duration_ms)],
    ["attempts", String(run.attempts)],
    ["ran on", run.owner || "—"],
    ["idempotency key", h("code", {}, run.idempotency_key)],
  ];
  return h("section", { class: "panel" }, h("h2", {}, "Run"),
    h("dl", { class: "facts" }, pairs.map(([term, value]) => [h("dt", {}, term), h("dd", {}, value)])));
}

function outcome(run) {
  const error = run.error;
  return h("section", { class: "panel", "data-testid": "outcome" },
    h("h2", {}, "Result"),
    run.result ? h("pre", { class: "params", "data-testid": "result" }, JSON.stringify(run.result, null, 2))
      : h("p", { class: "muted" }, "The handler returned no result."),
    error ? [h("h2", {}, "Error"), h("p", { class: "error-text" }, `${error.type}: ${error.message}`),
      error.traceback ? h("pre", { class: "traceback", "data-testid": "traceback" }, error.traceback)
        : h("p", { class: "muted small" }, "No traceback recorded.")] : null);
}

function attempts(run) {
  const log = Array.isArray(run.attempt_log) ? run.attempt_log : null;
  const head = ["attempt", "started", "ended", "took", "error", "backoff before the next"];
  const rows = log ? log.map(attemptRow) : [summaryRow(run)];
  return h("section", { class: "panel" }, h("h2", {}, "Attempts"),
    // One attempt is its run: a record keeps a log only of runs that took more than one.
    log || run.attempts <= 1 ? null : h("p", { class: "muted small" }, "This run's record keeps no log of its attempts: the run as a whole is shown."),
    h("div", { class: "table-wrap" }, h("table", { class: "table", "data-testid": "attempts" },
      h("thead", {}, h("tr", {}, head.map((t) => h("th", {}, t)))),
      h("tbody", {}, rows.length ? rows : h("tr", {}, h("td", { colspan: head.length, class: "muted" }, "It has not started yet."))))));
}

function attemptRow(attempt) {
  return h("tr", { "data-attempt": attempt.number },
    h("td", { class: "num" }, String(attempt.number)),
    h("td", { class: "nowrap" }, dateTime(attempt.started_at)),
    h("td", { class: "nowrap" }, dateTime(attempt.finished_at)),
    h("td", { class: "num" }, millis(took(attempt.started_at, attempt.finished_at))),
    h("td", { class: "error-text" }, attempt.error ? `${attempt.error.type}: ${attempt.error.message}` : ""),
    h("td", { class: "num" }, attempt.backoff_seconds === null || attempt.backoff_seconds === undefined ? "—" : seconds(attempt.backoff_seconds)));
}

function summaryRow(run) {
  if (!run.started_at) return [];
  return h("tr", { "data-attempt": "all" },
    h("td", { class: "num" }, run.attempts > 1 ? `1 to ${run.attempts}` : "1"),
    h("td", { class: "nowrap" }, dateTime(run.started_at)),
    h("td", { class: "nowrap" }, dateTime(run.finished_at)),
    h("td", { class: "num" }, millis(run.duration_ms)),
    h("td", { class: "error-text" }, run.error ? `${run.error.type}: ${run.error.message}` : ""),
    h("td", { class: "num" }, "—"));
}

/** What the handler logged through ctx.logger (INFO and above, masked, the first lines): a
 * list, not a table, so that a long line wraps on a phone. */
function logLines(run) {
  const lines = Array.isArray(run.log) ? run.log : [];
  return h("section", { class: "panel" }, h("h2", {}, "Its log"),
    lines.length
      ? h("ol", { class: "list", "data-testid": "run-log" }, lines.map((line) => h("li", {},
        h("div", { class: "small muted" }, `${dateTime(line.at)} · ${line.level}`),
        h("div", { class: "changes" }, line.message))))
      : h("p", { class: "muted" }, "The handler logged nothing at INFO or above."));
}

function took(start, end) {
  return start && end ? Date.parse(end) - Date.parse(start) : null;
}

function occurrence(run, runs) {
  const others = runs.filter((r) => r.id !== run.id);
  const cards = [...runs].sort((a, b) => a.shard - b.shard).map((r) => h("div", {
    class: `shard-card${r.id === run.id ? " current" : ""}`, "data-shard": r.shard, "data-run": r.id },
  h("div", { class: "shard-title" }, r.shards > 1 ? `Shard ${r.shard + 1} of ${r.shards}` : "Run", " ", badge(r.status)),
  h("div", { class: "small muted" }, `started ${dateTime(r.started_at)}`),
  h("div", { class: "small muted" }, `took ${millis(r.duration_ms)}, ${r.attempts} attempt${r.attempts === 1 ? "" : "s"}`),
  r.error ? h("div", { class: "small error-text" }, `${r.error.type}: ${r.error.message}`) : null,
  r.id === run.id ? h("div", { class: "small" }, "this run") : h("a", { class: "small", href: runHash(r.id) }, "open")));
  return h("section", { class: "panel" }, h("h2", {}, "Its occurrence"),
    others.length ? h("div", { class: "shards", "data-testid": "occurrence" }, cards)
      : h("p", { class: "muted" }, "No other shard or re-run of this occurrence."));
}
