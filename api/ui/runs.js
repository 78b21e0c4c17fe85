// Runs across jobs: filtered by status, handler and a range of scheduled times, newest first,
// paged with the API's cursor. The filters and the page live in the address
// (#/runs?status=failed&handler=ping&since=…&until=…&cursor=…; job_id=… for one job's runs),
// so a link shows the same runs.

import { get } from "./api.js";
import { errorCell } from "./dead_letters.js";
import { badge, h, jobHash, replace } from "./dom.js";
import { dateTime, millis } from "./format.js";
import { runHash } from "./run.js";

const STATUSES = ["running", "success", "failed", "timeout", "abandoned", "skipped", "cancelled"];
const PAGE_SIZE = 50;
const FILTERS = ["job_id", "status", "handler", "since", "until"];
// The time range is typed in UTC, as the API takes it; the inputs say so.
const RANGE_ZONE = "UTC";

/** The filters and the page the address names; an empty one is no filter. */
export function runsFilters(params) {
  const status = params.get("status");
  return {
    job_id: params.get("job_id") || "",
    status: STATUSES.includes(status) ? status : "",
    handler: params.get("handler") || "",
    since: params.get("since") || "",
    until: params.get("until") || "",
    cursor: params.get("cursor") || "",
  };
}

export function runsHash(filters) {
  const query = new URLSearchParams();
  for (const key of [...FILTERS, "cursor"]) {
    if (filters[key]) query.set(key, filters[key]);
  }
  const text = query.toString();
  return text ? `#/runs?${text}` : "#/runs";
}

function listPath(filters) {
  const query = new URLSearchParams({ limit: String(PAGE_SIZE) });
  for (const key of [...FILTERS, "cursor"]) {
    if (filters[key]) query.set(key, filters[key]);
  }
  return `/v1/executions?${query}`;
}

export async function runsView(main, filters) {
  const handlers = await get("/v1/handlers");
  const table = h("div", { class: "runs-list" });
  replace(main, h("section", { class: "panel runs" },
    h("h2", {}, "Runs", filters.job_id ? oneJob(filters) : null),
    filterForm(filters, handlers.items.map((item) => item.name)),
    table));
  async function load() {
    try {
      const page = await get(listPath(filters));
      replace(table, runsTable(page.items), pager(filters, page.next_cursor));
    } catch (err) {
      if (err.status !== 400) throw err;
      replace(table, h("p", { class: "error-text", role: "alert", "data-testid": "runs-refused" }, err.message));
    }
  }
  await load();
  return load;
}

function filterForm(filters, handlerNames) {
  const status = select("status", ["", ...STATUSES], filters.status, "any status");
  const handler = select("handler", ["", ...handlerNames], filters.handler, "any handler");
  const since = timeInput("since", filters.since);
  const until = timeInput("until", filters.until);
  const form = h("form", { class: "filters runs-filters", "data-testid": "runs-filters" },
    field("Status", status), field("Handler", handler),
    field(`Scheduled from (${RANGE_ZONE})`, since), field(`Scheduled until (${RANGE_ZONE})`, until),
    h("div", { class: "filter-buttons" },
      h("button", { type: "submit", class: "primary" }, "Show"),
      h("a", { class: "button", href: "#/runs" }, "Clear")));
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    location.hash = runsHash({
      job_id: filters.job_id, status: status.value, handler: handler.value,
      since: instantOf(since.value), until: instantOf(until.value), cursor: "",
    });
  });
  return form;
}

/** On one job's runs: a link to its page, and one to every job's runs with the same filters. */
function oneJob(filters) {
  return h("span", { class: "small heading-link" },
    "of ", h("a", { href: jobHash(filters.job_id), "data-testid": "runs-job" }, "one job"), " · ",
    h("a", { href: runsHash({ ...filters, job_id: "", cursor: "" }) }, "all jobs"));
}

function field(label, input) {
  return h("label", {}, h("span", { class: "label" }, label), input);
}

function select(name, values, chosen, anyLabel) {
  const known = values.includes(chosen) ? values : [...values, chosen];
  return h("select", { name }, known.map((value) =>
    h("option", { value, selected: value === chosen }, value || anyLabel)));
}

function timeInput(name, instant) {
  return h("input", { type: "datetime-local", name, step: 1, value: inputValue(instant) });
}

/** 2026-12-07T09:00:00Z as a datetime-local input shows it: 2026-12-07T09:00:00. */
function inputValue(instant) {
  const match = /^(\d{4}-\d{2}-\d{2}T\d{2}:\d{2}(:\d{2})?)/.exec(instant || "");
  return match ? match[1] : "";
}

/** A datetime-local value, read in UTC, as the API takes it; "" for none. */
export function instantOf(value) {
  if (!value) return "";
  return `${value.length === 16 ? `${value}:00` : value.slice(0, 19)}Z`;
}

function runsTable(runs) {
  const heads = ["job", "status", "scheduled", "started", "duration", "instance", "attempt", "error"];
  const rows = runs.map((run) => h("tr", { "data-run": run.id, "data-status": run.status },
    h("td", { class: "nowrap" }, h("a", { href: jobHash(run.job_id) }, run.job_name)),
    h("td", {}, badge(run.status)),
    h("td", { class: "nowrap" }, h("a", { href: runHash(run.id), title: "this run's attempts, result and log" }, dateTime(run.scheduled_at))),
    h("td", { class: "nowrap" }, dateTime(run.started_at)),
    h("td", { class: "num" }, millis(run.duration_ms)),
    h("td", { class: "instance" }, run.owner || "—"),
    h("td", { class: "num" }, String(run.attempts)),
    errorCell(run.error)));
  return h("div", { class: "table-wrap" }, h("table", { class: "table", "data-testid": "runs" },
    h("thead", {}, h("tr", {}, heads.map((t) => h("th", {}, t)))),
    h("tbody", {}, rows.length ? rows
      : h("tr", {}, h("td", { colspan: heads.length, class: "muted" }, "No runs match.")))));
}

function pager(filters, nextCursor) {
  const newest = filters.cursor ? h("a", { class: "button", href: runsHash({ ...filters, cursor: "" }) }, "Newest") : null;
  const older = nextCursor ? h("a", { class: "button", href: runsHash({ ...filters, cursor: nextCursor }) }, "Older runs") : null;
  if (!newest && !older) return null;
  return h("div", { class: "pager", "data-testid": "runs-pager" }, newest, older);
}
