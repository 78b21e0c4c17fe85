// The instances: each one's version, start, partitions of the due queue it holds, runs it has
// in flight (what its heartbeat last said), executions the store has it running, and its last
// heartbeat. Refreshed like every view.

import { get } from "./api.js";
import { h, replace } from "./dom.js";
import { dateTime } from "./format.js";

// Each column's header and what it means, on hover.
const HEADS = [
  ["instance", "Its instance_id"],
  ["version", "The tickd version it runs, as its heartbeat says"],
  ["started", "When it started, by its own clock"],
  ["partitions", "Partitions of the due queue it holds: it reads due jobs only in those"],
  ["runs in flight", "Runs it has claimed and not yet ended, as its last heartbeat said"],
  ["running", "Executions the store records running on it"],
  ["last heartbeat", "By its own clock"],
];

export async function instancesView(main) {
  const box = h("div", { class: "instances" });
  replace(main, box);
  async function load() {
    const instances = await get("/v1/instances");
    replace(box, h("section", { class: "panel" },
      h("h1", {}, "Instances"),
      h("p", { class: "muted" }, "The instances that beat, by id. Each heartbeat says the instance's version, its start and the runs it holds in flight; an instance that says nothing of itself shows —. One found dead is listed until the others end its leases."),
      instancesTable(instances.items)));
  }
  await load();
  return load;
}

function instancesTable(instances) {
  const rows = instances.map((one) => h("tr", { "data-instance": one.id },
    h("td", { class: "instance" }, one.id),
    h("td", { "data-testid": "version" }, one.version ?? "—"),
    h("td", { class: "nowrap", "data-testid": "started" }, dateTime(one.started_at)),
    h("td", { class: "num", "data-testid": "partitions" }, count(one.partitions)),
    h("td", { class: "num", "data-testid": "in-flight" }, count(one.runs_in_flight)),
    h("td", { class: "num", "data-testid": "running" }, String(one.running)),
    h("td", { class: "nowrap", "data-testid": "last-beat" }, dateTime(one.last_beat_at))));
  return h("div", { class: "table-wrap" }, h("table", { class: "table", "data-testid": "instances" },
    h("thead", {}, h("tr", {}, HEADS.map(([text, meaning]) => h("th", { title: meaning }, text)))),
    h("tbody", {}, rows.length ? rows
      : h("tr", {}, h("td", { colspan: HEADS.length, class: "muted" }, "No instance has beat yet.")))));
}

/** A count an instance says of itself; — from one that has not said. */
function count(value) {
  return value === null || value === undefined ? "—" : String(value);
}
