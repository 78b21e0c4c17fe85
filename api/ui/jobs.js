// "Jobs": a page of jobs at a time, searched, filtered and sorted by the API, with what each does,
// when it runs next and how it last went.

import { get, post } from "./api.js";
import { scheduleAsWritten, scheduleInWords } from "./cron.js";
import { badge, h, jobHash, link, replace } from "./dom.js";
import { dateTime, now, relative } from "./format.js";
import { canChange, canWrite } from "./session.js";
import { notify } from "./notify.js";

const PAGE_SIZE = 50;
// The statuses a "Last run failed" filter keeps.
const FAILED_STATUSES = "failed,timeout,abandoned";
// Typing waits this long for a pause before the API is asked.
const SEARCH_DELAY_MS = 250;

export async function jobsView(main) {
  const search = h("input", { type: "search", placeholder: "Search by name or id", "aria-label": "Search jobs", class: "search" });
  const stateFilter = h("select", { "aria-label": "Show" },
    ["all", "enabled", "paused", "failing"].map((v) => h("option", { value: v }, { all: "All jobs", enabled: "Enabled", paused: "Paused", failing: "Last run failed" }[v])));
  const handlerFilter = h("select", { "aria-label": "Handler" }, h("option", { value: "" }, "Every handler"));
  const sortBy = h("select", { "aria-label": "Sort by" },
    h("option", { value: "name" }, "By name"), h("option", { value: "next_run" }, "By next run"));
  const count = h("span", { class: "muted", "data-testid": "jobs-count" });
  const previous = h("button", { type: "button", disabled: true }, "Previous");
  const next = h("button", { type: "button", disabled: true }, "Next");
  const pager = h("div", { class: "toolbar pager" }, previous, next);
  const tbody = h("tbody");
  // The cursors of the pages before this one (null: the first page), and this page's.
  let before = [];
  let cursor = null;
  let asked = 0; // the latest request: an answer to an older one is dropped

  const toolbar = h("div", { class: "toolbar" }, search, stateFilter, handlerFilter, sortBy, count,
    h("span", { class: "spacer" }),
    canWrite() ? h("a", { class: "button primary", href: "#/new" }, "New job") : null);
  replace(main, h("section", { class: "panel" }, h("h2", {}, "Jobs"), toolbar,
    h("div", { class: "table-wrap" }, h("table", { class: "table", "data-testid": "jobs" },
      h("thead", {}, h("tr", {}, ["name", "handler", "schedule", "next run", "last run", "state", ""].map((t) => h("th", {}, t)))),
      tbody)),
    pager));

  function filtered() {
    return Boolean(search.value.trim() || handlerFilter.value || stateFilter.value !== "all");
  }

  function listPath() {
    const query = new URLSearchParams({ limit: String(PAGE_SIZE), total: "true", sort: sortBy.value });
    const text = search.value.trim();
    if (text) query.set("q", text);
    if (handlerFilter.value) query.set("handler", handlerFilter.value);
    if (stateFilter.value === "enabled") query.set("enabled", "true");
    if (stateFilter.value === "paused") query.set("enabled", "false");
    if (stateFilter.value === "failing") query.set("last_status", FAILED_STATUSES);
    if (cursor) query.set("cursor", cursor);
    return `/v1/jobs?${query}`;
  }

  function draw(page) {
    const first = before.length * PAGE_SIZE + 1;
    const last = first + page.items.length - 1;
    count.textContent = page.items.length
      ? `${first}–${last} of ${page.total} ${page.total === 1 ? "job" : "jobs"}`
      : "";
    previous.disabled = before.length === 0;
    next.disabled = !page.next_cursor;
    next.dataset.cursor = page.next_cursor || "";
    pager.hidden = previous.disabled && next.disabled;
    replace(tbody, page.items.length ? page.items.map((job) => row(job, load))
      : h("tr", {}, h("td", { colspan: 7, class: "muted" }, filtered() ? "No job matches." : "No jobs yet.")));
  }

  async function load() {
    asked += 1;
    const mine = asked;
    const page = await get(listPath());
    if (mine === asked) draw(page);
  }

  async function loadHandlers() {
    const handlers = (await get("/v1/handlers")).items.map((handler) => handler.name).sort();
    replace(handlerFilter, h("option", { value: "" }, "Every handler"), handlers.map((name) => h("option", { value: name }, name)));
  }

  function fromTheStart() {
    before = [];
    cursor = null;
    return load().catch((err) => notify(err.message, "error"));
  }

  let typing = null;
  search.addEventListener("input", () => {
    clearTimeout(typing);
    typing = setTimeout(fromTheStart, SEARCH_DELAY_MS);
  });
  for (const input of [stateFilter, handlerFilter, sortBy]) input.addEventListener("input", fromTheStart);
  next.addEventListener("click", () => {
    before.push(cursor);
    cursor = next.dataset.cursor || null;
    load().catch((err) => notify(err.message, "error"));
  });
  previous.addEventListener("click", () => {
    cursor = before.pop() || null;
    load().catch((err) => notify(err.message, "error"));
  });
  await Promise.all([loadHandlers(), load()]);
  return load;
}

function nextRun(job) {
  if (!job.enabled || !job.next_run_at) return h("td", { class: "muted" }, "—");
  const lateBy = (now() - Date.parse(job.next_run_at)) / 1000;
  return h("td", { class: `nowrap ${lateBy > 5 ? "late" : ""}`, title: dateTime(job.next_run_at) },
    lateBy > 5 ? `due ${relative(job.next_run_at)}` : relative(job.next_run_at));
}

function lastRun(job) {
  const last = job.last_execution;
  if (!last) return h("td", { class: "muted" }, "never ran");
  return h("td", { class: "nowrap", title: last.error || dateTime(last.finished_at) },
    badge(last.status), " ", h("span", { class: "muted" }, relative(last.finished_at)));
}

function row(job, reload) {
  return h("tr", { "data-job": job.name },
    h("td", {}, link(jobHash(job.id), job.name), job.system ? h("span", { class: "tag" }, "system") : null),
    h("td", {}, job.handler),
    h("td", {}, h("div", {}, scheduleInWords(job.schedule)), h("code", { class: "small" }, scheduleAsWritten(job.schedule))),
    nextRun(job),
    lastRun(job),
    h("td", {}, job.enabled ? h("span", { class: "pill on" }, "enabled") : h("span", { class: "pill off", title: job.paused_reason || "" }, "paused")),
    h("td", {}, canChange(job) ? h("div", { class: "actions" }, jobActions(job, reload)) : null));
}

/** Pause or resume, and trigger: the buttons of the table and of a job's page. */
export function jobActions(job, reload) {
  const act = (verb, done) => async (event) => {
    event.target.disabled = true;
    try {
      await post(`/v1/jobs/${encodeURIComponent(job.id)}/${verb}`, {});
      notify(`${job.name}: ${done}`);
      await reload();
    } catch (err) {
      notify(`${job.name}: ${err.message}`, "error");
      event.target.disabled = false;
    }
  };
  return [
    job.enabled
      ? h("button", { type: "button", onclick: act("pause", "paused") }, "Pause")
      : h("button", { type: "button", onclick: act("resume", "resumed") }, "Resume"),
    h("button", { type: "button", onclick: act("trigger", "triggered, runs now") }, "Trigger"),
  ];
}
