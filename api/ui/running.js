// The work running now: each run's job, handler, instance, attempt and age (the server's clock
// says how old it is), longest running first, with a Cancel button that asks before it acts.
// The instances that hold them have a view of their own (instances.js). Refreshed like every view.

import { get, post } from "./api.js";
import { h, jobHash, link, replace } from "./dom.js";
import { dateTime, span } from "./format.js";
import { notify } from "./notify.js";
import { runHash } from "./run.js";
import { canWrite } from "./session.js";

export async function runningView(main) {
  const box = h("div", { class: "running" });
  replace(main, box);
  let asking = false; // a confirmation on screen is not refreshed away
  async function load() {
    if (asking) return;
    const running = await get("/v1/running");
    replace(box, h("section", { class: "panel" },
      h("h1", {}, "Running"),
      h("p", { class: "muted" }, "Runs on the workers now, the longest running first. Cancelling stops an async handler within a tick; a sync handler's run is recorded cancelled when it returns or reaches its deadline. A cancelled run is not retried. ",
        link("#/instances", "The instances"), " that hold them, and how each one is, have a page of their own."),
      runningTable(running.items, ask, load)));
  }
  function ask(place, question, action) {
    asking = true;
    confirmIn(place, question, async () => { asking = false; await action(); }, () => { asking = false; });
  }
  await load();
  return load;
}

function runningTable(runs, ask, reload) {
  // The age and the Cancel first: on a phone they are on screen, the rest scrolls.
  const heads = ["job", "age", "", "instance", "attempt", "started", "handler"];
  const rows = runs.map((run) => h("tr", { "data-run": run.id },
    h("td", { class: "job-name" }, h("a", { href: jobHash(run.job_id) }, run.job_name),
      run.shards > 1 ? h("span", { class: "muted small" }, ` shard ${run.shard + 1}/${run.shards}`) : null),
    h("td", { class: "num nowrap", "data-testid": "age" }, span(run.age_seconds)),
    h("td", {}, h("div", { class: "actions" }, cancelCell(run, ask, reload))),
    h("td", { class: "instance" }, run.instance || "—"),
    h("td", { class: "num" }, String(run.attempts)),
    h("td", { class: "nowrap" }, h("a", { href: runHash(run.id), title: "this run's page" }, dateTime(run.started_at || run.scheduled_at))),
    h("td", {}, run.handler)));
  return h("div", { class: "table-wrap" }, h("table", { class: "table", "data-testid": "running" },
    h("thead", {}, h("tr", {}, heads.map((t) => h("th", {}, t)))),
    h("tbody", {}, rows.length ? rows
      : h("tr", {}, h("td", { colspan: heads.length, class: "muted" }, "Nothing is running.")))));
}

function cancelCell(run, ask, reload) {
  if (run.cancel_requested_by) {
    return h("span", { class: "muted", "data-testid": "cancel-asked" }, `cancel asked by ${run.cancel_requested_by}`);
  }
  if (!canWrite()) return null;
  const place = h("span", { class: "confirm-place" });
  const button = h("button", { type: "button", onclick: () => ask(place,
    `Cancel the ${run.job_name} run on ${run.instance || "its instance"}? It is recorded cancelled, not retried.`,
    async () => {
      try {
        await post(`/v1/executions/${encodeURIComponent(run.id)}/cancel`, {});
        notify(`Asked the ${run.job_name} run to stop`);
      } catch (err) {
        notify(err.message, "error");
      }
      await reload();
    }) }, "Cancel");
  return [button, place];
}

/** A question in `place` with a confirm and a keep button; `confirmed` runs on confirm. */
function confirmIn(place, question, confirmed, kept) {
  const yes = h("button", { type: "button", class: "primary danger", onclick: async () => {
    yes.disabled = true;
    await confirmed();
  } }, "Cancel the run");
  const no = h("button", { type: "button", onclick: () => { replace(place); kept(); } }, "Keep it running");
  replace(place, h("div", { class: "confirm", role: "alertdialog", "aria-label": question },
    h("span", {}, question), yes, no));
  yes.focus();
}
