// A job's page: its definition, next fire times, its runs (with a chart of duration and lag, and
// older pages on demand), retry for the failed ones, a backfill of a past range, delete, and who
// changed what.

import { api, get, post } from "./api.js";
import { STATUS_COLOURS, lines } from "./charts.js";
import { scheduleAsWritten, scheduleInWords } from "./cron.js";
import { deadLettersHash, errorCell } from "./dead_letters.js";
import { badge, h, jobHash, replace } from "./dom.js";
import { clock, dateTime, lagSeconds, millis, relative, seconds, setJobZone } from "./format.js";
import { jobActions } from "./jobs.js";
import { notify } from "./notify.js";
import { runHash } from "./run.js";
import { runsHash } from "./runs.js";
import { canChange } from "./session.js";

const RETRYABLE = ["failed", "timeout", "abandoned"];
const RUNS_SHOWN = 100;
const RUNS_AT_MOST = 500; // the API's largest page
const RUNS_CHARTED = 50;

export async function jobView(main, id) {
  const path = `/v1/jobs/${encodeURIComponent(id)}`;
  // A refresh draws the parts that show data again; the delete question and the backfill form
  // are drawn once, so a refresh neither closes the one nor empties the other.
  const parts = { head: h("div"), body: h("div"), backfill: h("div"), history: h("div") };
  const asking = h("div", { class: "delete-confirm", "data-testid": "delete-confirm" });
  replace(main, h("div", { class: "job" }, parts.head, asking, parts.body, parts.backfill, parts.history));
  // How many of its newest runs the page lists: each refresh reads them all again in one page,
  // so the list has no gap and every row's status is current. Past the API's largest page, the
  // Runs page lists the job's runs a page at a time.
  let shown = RUNS_SHOWN;
  async function load() {
    const [job, runs, history, preview] = await Promise.all([
      get(path), get(`${path}/executions?limit=${shown}`),
      get(`${path}/history?limit=50`), get(`${path}/preview?count=5`),
    ]);
    async function showOlder() {
      shown = Math.min(shown + RUNS_SHOWN, RUNS_AT_MOST);
      await load();
    }
    setJobZone(job.schedule.timezone);
    replace(parts.head, header(job, load, asking));
    replace(parts.body, h("div", { class: "columns" },
      h("div", {}, details(job), upcoming(preview)),
      h("div", {}, chart(runs.items))),
    executions(job, runs, showOlder, load));
    if (!parts.backfill.firstChild && canChange(job)) replace(parts.backfill, backfillPanel(job, load));
    replace(parts.history, changes(history.items));
  }
  await load();
  return load;
}

function header(job, reload, asking) {
  return h("section", { class: "job-head" },
    h("div", {},
      h("a", { href: "#/jobs", class: "muted small" }, "← all jobs"),
      h("h1", {}, job.name, " ", job.enabled ? h("span", { class: "pill on" }, "enabled") : h("span", { class: "pill off" }, "paused")),
      h("p", { class: "muted" }, `${job.handler} · ${scheduleInWords(job.schedule)}`,
        job.paused_reason ? ` · ${job.paused_reason}` : "")),
    h("div", { class: "actions" }, canChange(job)
      ? [jobActions(job, reload), h("a", { class: "button", href: `${jobHash(job.id)}/edit` }, "Edit"), deleteButton(job, asking)] : null));
}

/** Delete, after a question naming the job, at the revision shown (If-Match): a job changed
 * since this page was read is not deleted, and the page says so and shows it as it is now. */
function deleteButton(job, place) {
  return h("button", { type: "button", class: "danger", onclick: () => {
    const question = `Delete the job ${job.name}? Its schedule stops and it cannot be undone.`;
    const yes = h("button", { type: "button", class: "danger", onclick: async () => {
      yes.disabled = true;
      try {
        await api("DELETE", `/v1/jobs/${encodeURIComponent(job.id)}`, undefined, { "If-Match": `"${job.revision}"` });
        notify(`${job.name}: deleted`);
        location.hash = "#/jobs";
      } catch (err) {
        const changed = err.status === 412 ? "it changed since this page was read; look again before deleting" : err.message;
        replace(place, h("p", { class: "error-text", role: "alert" }, `${job.name} was not deleted: ${changed}`));
      }
    } }, `Delete ${job.name}`);
    const no = h("button", { type: "button", onclick: () => replace(place) }, "Cancel");
    replace(place, h("div", { class: "confirm", role: "alertdialog", "aria-label": question },
      h("span", {}, question), yes, no));
    no.focus();
  } }, "Delete");
}

// The range is typed in UTC, as the API takes it; the inputs say so.
const BACKFILL_ZONE = "UTC";
const BACKFILL_FIELDS = { start: "From", end: "Until" };

/** Run the occurrences of a past range that have no run: previewed first (a dry run), then
 * queued; the answer says how many, and a refusal names the input at fault. */
function backfillPanel(job, reload) {
  const inputs = {
    start: h("input", { type: "datetime-local", name: "start", step: 1, required: true }),
    end: h("input", { type: "datetime-local", name: "end", step: 1, required: true }),
  };
  const outcome = h("div", { class: "backfill-outcome", "data-testid": "backfill-outcome", role: "status" });
  const fields = Object.entries(inputs).map(([name, input]) => h("div", { class: "field", "data-field": name },
    h("label", {}, h("span", { class: "label" }, `${BACKFILL_FIELDS[name]} (${BACKFILL_ZONE})`), input),
    h("div", { class: "field-error" })));
  const send = (dryRun) => async () => {
    for (const box of fields) { box.classList.remove("invalid"); replace(box.querySelector(".field-error")); }
    try {
      const body = { start: utcOf(inputs.start.value), end: utcOf(inputs.end.value), dry_run: dryRun };
      const out = await post(`/v1/jobs/${encodeURIComponent(job.id)}/backfill`, body);
      replace(outcome, backfillSummary(out));
      if (!dryRun) await reload();
    } catch (err) {
      replace(outcome, h("p", { class: "error-text", role: "alert" }, refusal(err)));
      for (const { field, reason } of err.errors || []) {
        const box = fields.find((b) => b.dataset.field === field.replace(/^body\./, ""));
        if (!box) continue;
        box.classList.add("invalid");
        replace(box.querySelector(".field-error"), reason);
      }
    }
  };
  const form = h("form", { class: "backfill", "data-testid": "backfill" }, h("div", { class: "row" }, fields),
    h("div", { class: "form-actions" },
      h("button", { type: "button", onclick: () => form.reportValidity() && send(true)() }, "Preview"),
      h("button", { type: "submit", class: "primary" }, "Queue runs")),
    outcome);
  form.addEventListener("submit", (event) => { event.preventDefault(); send(false)(); });
  return h("section", { class: "panel" }, h("h2", {}, "Backfill"),
    h("p", { class: "muted small" }, "Runs the occurrences of a past range that have no run yet, one a second."),
    form);
}

/** A datetime-local value read in UTC: 2026-12-07T09:00 is 2026-12-07T09:00:00Z. */
function utcOf(value) {
  return `${value.length === 16 ? `${value}:00` : value.slice(0, 19)}Z`;
}

function backfillSummary(out) {
  const count = out.occurrences.length;
  const runs = `${count} occurrence${count === 1 ? "" : "s"}`;
  const text = [out.dry_run ? `${runs} would be queued` : `Queued ${runs}`];
  if (out.already_run.length) text.push(`${out.already_run.length} already ran and are left out`);
  if (out.truncated) text.push(`the range holds more: at most ${count + out.already_run.length} at a time, backfill the rest after`);
  return h("p", {}, `${text.join("; ")}.`);
}

/** The API's refusal, each field at fault named as the form labels it. */
function refusal(err) {
  const named = (err.errors || []).map(({ field, reason }) => {
    const bare = field.replace(/^body\./, "");
    return `${BACKFILL_FIELDS[bare] || bare}: ${reason}`;
  });
  return named.length ? `Not queued. ${named.join("; ")}` : `Not queued: ${err.message}`;
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

function executions(job, page, showOlder, reload) {
  const runs = page.items;
  const rows = runs.map((run) => h("tr", { "data-status": run.status },
    h("td", {}, badge(run.status)),
    h("td", { class: "nowrap" }, h("a", { href: runHash(run.id), title: "this run's attempts, result and shards" }, dateTime(run.scheduled_at))),
    h("td", { class: "nowrap" }, dateTime(run.started_at)),
    h("td", { class: "num" }, seconds(lagSeconds(run))),
    h("td", { class: "num" }, millis(run.duration_ms)),
    h("td", { class: "num" }, String(run.attempts)),
    h("td", { class: "num nowrap" }, run.shards > 1 ? `${run.shard + 1} of ${run.shards}` : ""),
    errorCell(run.error),
    h("td", {}, RETRYABLE.includes(run.status) && canChange(job) ? retryButton(run, reload) : null)));
  return h("section", { class: "panel" }, h("h2", {}, "Executions",
    h("a", { class: "small heading-link", href: deadLettersHash({ job_id: job.id }) }, "dead letters")),
    h("div", { class: "table-wrap" }, h("table", { class: "table", "data-testid": "executions" },
      h("thead", {}, h("tr", {}, ["status", "scheduled", "started", "lag", "duration", "attempts", "shard", "error", ""].map((t) => h("th", {}, t)))),
      h("tbody", {}, rows.length ? rows : h("tr", {}, h("td", { colspan: 9, class: "muted" }, "No runs yet."))))),
    h("div", { class: "toolbar pager", "data-testid": "runs-pager" },
      h("span", { class: "muted small" }, `${runs.length} runs shown`),
      olderRuns(job, runs.length, page.next_cursor, showOlder)));
}

/** More of the job's older runs here, or, past the API's largest page, on the Runs page. */
function olderRuns(job, count, nextCursor, showOlder) {
  if (!nextCursor) return null;
  if (count >= RUNS_AT_MOST) {
    return h("a", { class: "button", href: runsHash({ job_id: job.id, cursor: nextCursor }) }, "Older runs, on the Runs page");
  }
  return h("button", { type: "button", onclick: async (event) => {
    event.target.disabled = true;
    try {
      await showOlder();
    } catch (err) {
      notify(err.message, "error");
      event.target.disabled = false;
    }
  } }, `Older runs (${Math.min(RUNS_SHOWN, RUNS_AT_MOST - count)} more)`);
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
