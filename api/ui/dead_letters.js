// Dead letters: the runs that failed for good, filtered by job and by handler (kept in the
// address, #/dead-letters?job_id=…&handler=…&state=…), re-driven one at a time or all that
// match, or discarded. Every action asks first; the API writes each into the job's history.

import { all, get, post } from "./api.js";
import { badge, h, jobHash, replace } from "./dom.js";
import { dateTime } from "./format.js";
import { notify } from "./notify.js";
import { runHash } from "./run.js";
import { canWrite } from "./session.js";

const STATES = ["open", "redriving", "redriven", "discarded"];
const LISTED = 500;
const LISTED_PAGES = 2;
// The most the API re-drives in one call: the bulk action sends the ids listed, this many a call,
// so it re-drives exactly the dead letters its button counts.
const REDRIVE_BATCH = 100;

/** The filters the address names; an empty one is no filter. */
export function deadLetterFilters(params) {
  const state = params.get("state");
  return {
    job_id: params.get("job_id") || "",
    handler: params.get("handler") || "",
    state: STATES.includes(state) ? state : "open",
  };
}

export function deadLettersHash(filters) {
  const query = new URLSearchParams();
  for (const [key, value] of Object.entries(filters)) {
    if (value && !(key === "state" && value === "open")) query.set(key, value);
  }
  const text = query.toString();
  return text ? `#/dead-letters?${text}` : "#/dead-letters";
}

function listPath(filters, withJob) {
  const query = new URLSearchParams({ state: filters.state, limit: String(LISTED) });
  if (filters.handler) query.set("handler", filters.handler);
  if (withJob && filters.job_id) query.set("job_id", filters.job_id);
  return `/v1/dead-letters?${query}`;
}

export async function deadLettersView(main, filters) {
  const box = h("div", { class: "dead-letters" });
  replace(main, box);
  const handlers = await get("/v1/handlers");
  let asking = false; // a confirmation on screen is not refreshed away
  async function load() {
    if (asking) return;
    const [listed, jobsSeen] = await Promise.all([
      all(listPath(filters, true), LISTED_PAGES),
      filters.job_id ? all(listPath(filters, false), 1) : null,
    ]);
    replace(box, h("section", { class: "panel" },
      h("h1", {}, "Dead letters"),
      h("p", { class: "muted" }, "Runs that failed for good, after their last retry. Re-driving one runs its occurrence again (same idempotency key)."),
      toolbar(filters, handlers.items, jobsOf(jobsSeen || listed, filters.job_id, listed)),
      filters.state === "open" && canWrite() && listed.length ? bulkBar(filters, listed, ask, load) : null,
      table(listed, filters, ask, load)));
  }
  function ask(place, question, confirmLabel, action) {
    asking = true;
    const done = () => { asking = false; };
    confirmIn(place, question, confirmLabel, async () => { done(); await action(); }, done);
  }
  await load();
  return load;
}

/** The jobs to offer in the job filter: those with dead letters, and the one chosen. */
function jobsOf(letters, chosen, listed) {
  const names = new Map(letters.map((d) => [d.job_id, d.job_name]));
  if (chosen && !names.has(chosen)) names.set(chosen, listed.length ? listed[0].job_name : chosen);
  return [...names].sort((a, b) => a[1].localeCompare(b[1]));
}

function toolbar(filters, handlers, jobs) {
  const go = (change) => { location.hash = deadLettersHash({ ...filters, ...change }); };
  const jobSelect = h("select", { "aria-label": "Job", onchange: (e) => go({ job_id: e.target.value }) },
    h("option", { value: "" }, "all jobs"),
    jobs.map(([id, name]) => h("option", { value: id, selected: id === filters.job_id }, name)));
  const handlerSelect = h("select", { "aria-label": "Handler", onchange: (e) => go({ handler: e.target.value }) },
    h("option", { value: "" }, "all handlers"),
    handlers.map((hd) => h("option", { value: hd.name, selected: hd.name === filters.handler }, hd.name)));
  const stateSelect = h("select", { "aria-label": "State", onchange: (e) => go({ state: e.target.value }) },
    STATES.map((s) => h("option", { value: s, selected: s === filters.state }, s)));
  return h("div", { class: "toolbar" }, jobSelect, handlerSelect, stateSelect);
}

/** The bulk action names the dead letters listed, no more: when the list stops at its cap, the
 * button says it re-drives the newest of them. */
function bulkBar(filters, listed, ask, reload) {
  const count = listed.length;
  const capped = count >= LISTED * LISTED_PAGES;
  const place = h("span", { class: "confirm-place" });
  const scope = [filters.job_id ? "this job" : "every job", filters.handler ? `handler ${filters.handler}` : "every handler"].join(", ");
  const what = capped ? `the ${count} newest open dead letters` : `all ${count} open dead letters`;
  const button = h("button", { type: "button", onclick: () => ask(place,
    `Re-drive ${what} of ${scope}?`, "Re-drive all",
    async () => { await redriveListed(filters, listed); await reload(); }) },
  capped ? `Re-drive the ${count} newest` : `Re-drive all ${count} matching`);
  return h("div", { class: "toolbar bulk" }, button, place);
}

async function redriveListed(filters, listed) {
  const filter = {};
  if (filters.job_id) filter.job_id = filters.job_id;
  if (filters.handler) filter.handler = filters.handler;
  let queued = 0;
  const skipped = [];
  try {
    for (let start = 0; start < listed.length; start += REDRIVE_BATCH) {
      const ids = listed.slice(start, start + REDRIVE_BATCH).map((run) => run.id);
      const out = await post("/v1/dead-letters/redrive", { ...filter, ids });
      queued += out.requests.length;
      skipped.push(...out.skipped);
    }
  } catch (err) {
    notify(err.message, "error");
  }
  notify(`Re-drive queued for ${queued}` + (skipped.length ? `; ${skipped.length} not re-driven: ${skipped[0].reason}` : ""));
}

function table(letters, filters, ask, reload) {
  const rows = letters.map((run) => h("tr", { "data-dead-letter": run.id, "data-state": run.dead_letter },
    h("td", {}, h("a", { href: jobHash(run.job_id) }, run.job_name)),
    h("td", {}, run.handler),
    h("td", { class: "nowrap" }, h("a", { href: runHash(run.id) }, dateTime(run.scheduled_at))),
    h("td", { class: "nowrap" }, dateTime(run.finished_at)),
    h("td", {}, badge(run.status)),
    h("td", { class: "num" }, String(run.attempts)),
    h("td", { class: "num nowrap" }, run.shards > 1 ? `${run.shard + 1} of ${run.shards}` : ""),
    h("td", { class: "error-text" }, run.error ? `${run.error.type}: ${run.error.message}` : ""),
    h("td", {}, run.dead_letter),
    h("td", {}, canWrite() ? actions(run, ask, reload) : null)));
  return h("div", { class: "table-wrap" }, h("table", { class: "table", "data-testid": "dead-letters" },
    h("thead", {}, h("tr", {}, ["job", "handler", "scheduled", "ended", "status", "attempts", "shard", "error", "state", ""].map((t) => h("th", {}, t)))),
    h("tbody", {}, rows.length ? rows : h("tr", {}, h("td", { colspan: 10, class: "muted" },
      filters.state === "open" ? "No open dead letters: nothing failed for good." : `No dead letters ${filters.state}.`)))));
}

function actions(run, ask, reload) {
  const place = h("div", { class: "confirm-place" });
  const buttons = h("div", { class: "actions" });
  const act = (path, done) => async () => {
    try {
      await post(`/v1/dead-letters/${encodeURIComponent(run.id)}/${path}`, {});
      notify(done);
    } catch (err) {
      notify(err.message, "error");
    }
    await reload();
  };
  if (run.dead_letter === "open") {
    buttons.append(h("button", { type: "button", onclick: () => ask(place,
      `Re-drive the ${run.job_name} run of ${dateTime(run.scheduled_at)}?`, "Re-drive",
      act("redrive", "Re-drive queued")) }, "Re-drive"));
  }
  if (run.dead_letter === "open" || run.dead_letter === "redriving") {
    buttons.append(h("button", { type: "button", onclick: () => ask(place,
      `Discard the ${run.job_name} run of ${dateTime(run.scheduled_at)}? It is no longer counted as unhandled.`, "Discard",
      act("discard", "Dead letter discarded")) }, "Discard"));
  }
  return [buttons, place];
}

/** A question in `place` with a confirm and a cancel button; `confirmed` runs on confirm. */
function confirmIn(place, question, confirmLabel, confirmed, cancelled) {
  const yes = h("button", { type: "button", class: "primary", onclick: async () => {
    yes.disabled = true;
    await confirmed();
  } }, confirmLabel);
  const no = h("button", { type: "button", onclick: () => { replace(place); cancelled(); } }, "Cancel");
  replace(place, h("div", { class: "confirm", role: "alertdialog", "aria-label": question },
    h("span", {}, question), yes, no));
  yes.focus();
}
