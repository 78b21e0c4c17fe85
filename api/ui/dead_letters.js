// Dead letters: the runs that failed for good, filtered by job and by handler (kept in the
// address, #/dead-letters?job_id=…&handler=…&state=…), their identical errors counted, and
// re-driven or discarded: one at a time, those selected, or all that match. Every action asks
// first and names exactly the dead letters it sends; the API writes each into the job's history.

import { all, get, post } from "./api.js";
import { badge, h, jobHash, replace } from "./dom.js";
import { dateTime } from "./format.js";
import { notify } from "./notify.js";
import { runHash } from "./run.js";
import { canWrite } from "./session.js";

const STATES = ["open", "redriving", "redriven", "discarded"];
const LISTED = 500;
const LISTED_PAGES = 2;
// The most the API re-drives or discards in one call: a bulk action sends the ids listed or
// selected, this many a call, so it acts on exactly the dead letters its button counts.
const BATCH = 100;
// An error in a list: its type and the first line of its message, cut to this many characters
// (the whole message is its tooltip, and the run's page).
const ERROR_CHARS = 120;
const GROUPS_SHOWN = 10;

/** "Type: first line of the message", cut to `width` characters; "" for no error. */
export function errorHeadline(error, width = ERROR_CHARS) {
  if (!error) return "";
  const first = firstLine(error.message);
  const text = [error.type, first].filter(Boolean).join(": ");
  return text.length <= width ? text : `${text.slice(0, width - 1)}…`;
}

/** The first line of a message that is not blank. */
function firstLine(message) {
  return String(message || "").split(/\r?\n/).map((line) => line.trim()).find(Boolean) || "";
}

/** An error as a list shows it: its headline, the whole of it on hover. Text only (dom.js). */
export function errorCell(error, attrs) {
  if (!error) return h("td", attrs || {}, "");
  const whole = [error.type, error.message].filter(Boolean).join(": ");
  return h("td", { class: "error-text", title: whole, ...(attrs || {}) }, errorHeadline(error));
}

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

function groupsPath(filters) {
  const query = new URLSearchParams({ state: filters.state });
  if (filters.handler) query.set("handler", filters.handler);
  if (filters.job_id) query.set("job_id", filters.job_id);
  return `/v1/dead-letters/groups?${query}`;
}

const ACTIONABLE = ["open", "redriving"];

export async function deadLettersView(main, filters) {
  const box = h("div", { class: "dead-letters" });
  replace(main, box);
  const handlers = await get("/v1/handlers");
  const selected = new Set(); // ids, kept across refreshes while they are listed
  const folding = { groups: true }; // the groups unfolded or not, as left, across refreshes
  let asking = false; // a confirmation on screen is not refreshed away
  async function load() {
    if (asking) return;
    const [listed, jobsSeen, groups] = await Promise.all([
      all(listPath(filters, true), LISTED_PAGES),
      filters.job_id ? all(listPath(filters, false), 1) : null,
      get(groupsPath(filters)),
    ]);
    const ids = new Set(listed.map((run) => run.id));
    for (const id of [...selected]) if (!ids.has(id)) selected.delete(id);
    const selecting = canWrite() && ACTIONABLE.includes(filters.state) && listed.length > 0;
    const selection = selecting ? selectionBar(listed, selected, ask, load) : null;
    replace(box, h("section", { class: "panel" },
      h("h1", {}, "Dead letters"),
      h("p", { class: "muted" }, "Runs that failed for good, after their last retry. Re-driving one runs its occurrence again (same idempotency key)."),
      toolbar(filters, handlers.items, jobsOf(jobsSeen || listed, filters.job_id, listed)),
      filters.state === "open" && canWrite() && listed.length ? bulkBar(filters, listed, ask, load) : null,
      groupsPanel(groups, listed, selecting ? selection : null, folding),
      selection ? selection.bar : null,
      table(listed, filters, ask, load, selection)));
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

/** The bulk actions name the dead letters listed, no more: when the list stops at its cap, the
 * buttons say they act on the newest of them. */
function bulkBar(filters, listed, ask, reload) {
  const count = listed.length;
  const capped = count >= LISTED * LISTED_PAGES;
  const place = h("span", { class: "confirm-place" });
  const scope = [filters.job_id ? "this job" : "every job", filters.handler ? `handler ${filters.handler}` : "every handler"].join(", ");
  const what = capped ? `the ${count} newest open dead letters` : `all ${count} open dead letters`;
  const redrive = h("button", { type: "button", onclick: () => ask(place,
    `Re-drive ${what} of ${scope}?`, "Re-drive all",
    async () => { await actOn("redrive", listed); await reload(); }) },
  capped ? `Re-drive the ${count} newest` : `Re-drive all ${count} matching`);
  const discard = h("button", { type: "button", onclick: () => ask(place,
    `Discard ${what} of ${scope}? They are no longer counted as unhandled.`, "Discard all",
    async () => { await actOn("discard", listed); await reload(); }) },
  capped ? `Discard the ${count} newest` : `Discard all ${count} matching`);
  return h("div", { class: "toolbar bulk" }, redrive, discard, place);
}

/** Re-drive or discard exactly these dead letters, BATCH a call; says what was done. */
async function actOn(action, runs) {
  let done = 0;
  const skipped = [];
  try {
    for (let start = 0; start < runs.length; start += BATCH) {
      const ids = runs.slice(start, start + BATCH).map((run) => run.id);
      const out = await post(`/v1/dead-letters/${action}`, { ids });
      done += action === "redrive" ? out.requests.length : out.count;
      skipped.push(...out.skipped);
    }
  } catch (err) {
    notify(err.message, "error");
  }
  const said = action === "redrive" ? `Re-drive queued for ${done}` : `Discarded ${done}`;
  const verb = action === "redrive" ? "re-driven" : "discarded";
  notify(said + (skipped.length ? `; ${skipped.length} not ${verb}: ${skipped[0].reason}` : ""));
}

/** The bar of the rows ticked: how many, and what to do with them. `update` redraws it as
 * boxes are ticked, without redrawing the table. */
function selectionBar(listed, selected, ask, reload) {
  const place = h("span", { class: "confirm-place" });
  const count = h("span", { class: "selection-count", "data-testid": "selection-count" });
  const chosen = () => listed.filter((run) => selected.has(run.id));
  const open = () => chosen().filter((run) => run.dead_letter === "open");
  const redrive = h("button", { type: "button", onclick: () => ask(place,
    `Re-drive the ${open().length} selected open dead ${plural(open().length)}?`, "Re-drive selected",
    async () => { await actOn("redrive", open()); selected.clear(); await reload(); }) }, "Re-drive selected");
  const discard = h("button", { type: "button", onclick: () => ask(place,
    `Discard the ${chosen().length} selected dead ${plural(chosen().length)}? They are no longer counted as unhandled.`, "Discard selected",
    async () => { await actOn("discard", chosen()); selected.clear(); await reload(); }) }, "Discard selected");
  const clear = h("button", { type: "button", class: "link", onclick: () => { selected.clear(); update(); } }, "Clear");
  const bar = h("div", { class: "toolbar selection", "data-testid": "selection" }, count, redrive, discard, clear, place);
  const boxes = [];
  function update() {
    const n = chosen().length;
    count.textContent = n ? `${n} selected` : "None selected: tick rows, or select a group of errors.";
    redrive.disabled = open().length === 0;
    discard.disabled = clear.disabled = n === 0;
    for (const [box, id] of boxes) box.checked = selected.has(id);
    if (all_) {
      all_.checked = n > 0 && n === listed.length;
      all_.indeterminate = n > 0 && n < listed.length;
    }
  }
  let all_ = null;
  const toggle = (ids, on) => {
    for (const id of ids) if (on) selected.add(id); else selected.delete(id);
    update();
  };
  const checkbox = (run) => {
    const box = h("input", { type: "checkbox", "aria-label": `Select the ${run.job_name} run of ${dateTime(run.scheduled_at)}`,
      onchange: (e) => toggle([run.id], e.target.checked) });
    boxes.push([box, run.id]);
    return box;
  };
  const selectAll = () => {
    all_ = h("input", { type: "checkbox", "aria-label": "Select every dead letter listed",
      onchange: (e) => toggle(listed.map((run) => run.id), e.target.checked) });
    return all_;
  };
  const selectGroup = (ids) => toggle(ids, true);
  update();
  return { bar, checkbox, selectAll, selectGroup, update };
}

function plural(n) {
  return n === 1 ? "letter" : "letters";
}

/** Identical errors (same job, type and first line), counted, the largest first. */
function groupsPanel(groups, listed, selection, folding) {
  if (!groups.groups.length) return null;
  const listedIds = new Set(listed.map((run) => run.id));
  const shown = groups.groups.slice(0, GROUPS_SHOWN);
  const of = groups.complete ? "" : ` (of the newest ${groups.read})`;
  const title = groups.groups.length > shown.length
    ? `Identical errors: the ${shown.length} largest of ${groups.groups.length} groups${of}`
    : `Identical errors: ${groups.groups.length} ${groups.groups.length === 1 ? "group" : "groups"}${of}`;
  const rows = shown.map((g) => {
    const ids = g.ids.filter((id) => listedIds.has(id));
    const error = g.error_type ? { type: g.error_type, message: g.error } : null;
    return h("tr", { "data-group": g.job_id },
      h("td", { class: "num group-count" }, String(g.count)),
      h("td", {},
        h("div", { class: "error-text", title: error ? errorHeadline(error, Infinity) : null }, error ? errorHeadline(error) : "no error"),
        h("div", { class: "muted small" }, `${g.job_name} · newest ${dateTime(g.newest_at)}`)),
      selection ? h("td", { class: "nowrap" }, h("button", { type: "button", disabled: ids.length === 0,
        "aria-label": `Select the ${ids.length} ${g.job_name} dead ${plural(ids.length)} of ${g.error_type}`,
        onclick: () => selection.selectGroup(ids) }, `Select ${ids.length}`)) : null);
  });
  return h("details", { class: "groups", open: folding.groups, "data-testid": "error-groups",
    ontoggle: (e) => { folding.groups = e.target.open; } },
    h("summary", {}, title),
    h("div", { class: "table-wrap" }, h("table", { class: "table compact" },
      h("thead", {}, h("tr", {}, ["count", "error, job and newest", selection ? "" : null].filter((t) => t !== null).map((t) => h("th", {}, t)))),
      h("tbody", {}, rows))));
}

function table(letters, filters, ask, reload, selection) {
  const selectAll = selection ? selection.selectAll() : null;
  const rows = letters.map((run) => h("tr", { "data-dead-letter": run.id, "data-state": run.dead_letter },
    selection ? h("td", {}, selection.checkbox(run)) : null,
    h("td", {}, h("a", { href: jobHash(run.job_id) }, run.job_name)),
    h("td", {}, run.handler),
    h("td", { class: "nowrap" }, h("a", { href: runHash(run.id) }, dateTime(run.scheduled_at))),
    h("td", { class: "nowrap" }, dateTime(run.finished_at)),
    h("td", {}, badge(run.status)),
    h("td", { class: "num" }, String(run.attempts)),
    h("td", { class: "num nowrap" }, run.shards > 1 ? `${run.shard + 1} of ${run.shards}` : ""),
    errorCell(run.error),
    h("td", {}, run.dead_letter),
    h("td", {}, canWrite() ? actions(run, ask, reload) : null)));
  if (selection) selection.update();
  const heads = ["job", "handler", "scheduled", "ended", "status", "attempts", "shard", "error", "state", ""].map((t) => h("th", {}, t));
  const columns = heads.length + (selection ? 1 : 0);
  return h("div", { class: "table-wrap" }, h("table", { class: "table", "data-testid": "dead-letters" },
    h("thead", {}, h("tr", {}, selection ? h("th", {}, selectAll) : null, heads)),
    h("tbody", {}, rows.length ? rows : h("tr", {}, h("td", { colspan: columns, class: "muted" },
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
