// "Jobs": every job, searchable, with what it does, when it runs next and how it last went.

import { all, get, post } from "./api.js";
import { scheduleAsWritten, scheduleInWords } from "./cron.js";
import { badge, h, jobHash, link, replace } from "./dom.js";
import { dateTime, millis, now, relative } from "./format.js";
import { canChange, canWrite } from "./session.js";
import { notify } from "./notify.js";

export async function jobsView(main) {
  const search = h("input", { type: "search", placeholder: "Search by name or handler", "aria-label": "Search jobs", class: "search" });
  const stateFilter = h("select", { "aria-label": "Show" },
    ["all", "enabled", "paused", "failing"].map((v) => h("option", { value: v }, { all: "All jobs", enabled: "Enabled", paused: "Paused", failing: "Last run failed" }[v])));
  const handlerFilter = h("select", { "aria-label": "Handler" }, h("option", { value: "" }, "Every handler"));
  const count = h("span", { class: "muted" });
  const tbody = h("tbody");
  let jobs = [];
  let latest = new Map(); // job id -> its newest finished execution

  const toolbar = h("div", { class: "toolbar" }, search, stateFilter, handlerFilter, count,
    h("span", { class: "spacer" }),
    canWrite() ? h("a", { class: "button primary", href: "#/new" }, "New job") : null);
  replace(main, h("section", { class: "panel" }, h("h2", {}, "Jobs"), toolbar,
    h("div", { class: "table-wrap" }, h("table", { class: "table", "data-testid": "jobs" },
      h("thead", {}, h("tr", {}, ["name", "handler", "schedule", "next run", "last run", "state", ""].map((t) => h("th", {}, t)))),
      tbody))));

  function visible(job) {
    const text = search.value.trim().toLowerCase();
    if (text && !job.name.toLowerCase().includes(text) && !job.handler.toLowerCase().includes(text)) return false;
    if (handlerFilter.value && job.handler !== handlerFilter.value) return false;
    const last = job.last_execution && job.last_execution.status;
    return { all: true, enabled: job.enabled, paused: !job.enabled,
      failing: ["failed", "timeout", "abandoned"].includes(last) }[stateFilter.value];
  }

  function draw() {
    const shown = jobs.filter(visible);
    count.textContent = `${shown.length} of ${jobs.length}`;
    replace(tbody, shown.length ? shown.map((job) => row(job, latest.get(job.id), load))
      : h("tr", {}, h("td", { colspan: 7, class: "muted" }, jobs.length ? "No job matches." : "No jobs yet.")));
  }

  async function load() {
    const [found, recent] = await Promise.all([all("/v1/jobs?limit=500"), get("/v1/executions?limit=500")]);
    jobs = found;
    latest = new Map();
    for (const run of recent.items) if (!latest.has(run.job_id) && run.status !== "running") latest.set(run.job_id, run);
    const handlers = [...new Set(jobs.map((j) => j.handler))].sort();
    const chosen = handlerFilter.value;
    replace(handlerFilter, h("option", { value: "" }, "Every handler"), handlers.map((name) => h("option", { value: name }, name)));
    handlerFilter.value = handlers.includes(chosen) ? chosen : "";
    draw();
  }

  for (const input of [search, stateFilter, handlerFilter]) input.addEventListener("input", draw);
  await load();
  return load;
}

function nextRun(job) {
  if (!job.enabled || !job.next_run_at) return h("td", { class: "muted" }, "—");
  const lateBy = (now() - Date.parse(job.next_run_at)) / 1000;
  return h("td", { class: `nowrap ${lateBy > 5 ? "late" : ""}`, title: dateTime(job.next_run_at) },
    lateBy > 5 ? `due ${relative(job.next_run_at)}` : relative(job.next_run_at));
}

function row(job, newest, reload) {
  // The job's own record of its last run; the newest execution listed when it has none yet.
  const last = job.last_execution || newest;
  const durationMs = newest && (!job.last_execution || newest.id === job.last_execution.execution_id) ? newest.duration_ms : null;
  return h("tr", { "data-job": job.name },
    h("td", {}, link(jobHash(job.id), job.name), job.system ? h("span", { class: "tag" }, "system") : null),
    h("td", {}, job.handler),
    h("td", {}, h("div", {}, scheduleInWords(job.schedule)), h("code", { class: "small" }, scheduleAsWritten(job.schedule))),
    nextRun(job),
    h("td", { class: "nowrap" }, last ? [badge(last.status), " ", h("span", { class: "muted" }, millis(durationMs))] : h("span", { class: "muted" }, "never ran")),
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
