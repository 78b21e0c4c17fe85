// Create or edit a job. The API validates (a 422 names each field at fault, shown beside it,
// every field's at once: what the request's shape hides, dry runs find);
// the schedule's next fire times are previewed through the API as it is typed, DST changes marked.
// An edit sends only the fields the user changed, as a PATCH at the revision read (If-Match):
// what the form does not show (jitter, the re-drive policy) and what it shows masked (secret
// params) stay as stored, and a change made meanwhile by someone else is a 412, not overwritten.

import { ApiError, api, get, post } from "./api.js";
import { cronInWords, intervalInWords } from "./cron.js";
import { h, jobHash, replace } from "./dom.js";
import { previewList } from "./job.js";

const PREVIEW_COUNT = 8;
const PREVIEW_DELAY_MS = 300;
// Dry runs a refused save makes at most, each with the fields refused so far put back as read,
// to find the errors the first refusal hid: the server checks a request's shape (a name, a
// number's range) before the handler, the zone and the expression.
const MAX_PROBES = 3;
// The name a probe sends when the refused name is a new job's, still empty as read.
const PROBE_NAME = "dry-run-probe";
// The names the API takes (scheduler/jobspec.py's NAME_PATTERN): the preview hashes `H` with the
// name typed only once it is one, so a name still being fixed never hides the schedule's errors.
const NAME = /^[A-Za-z0-9][A-Za-z0-9._:\/-]{0,199}$/;

function field(key, label, input, hint) {
  return h("div", { class: "field", "data-field": key },
    h("label", {}, h("span", { class: "label" }, label), input),
    hint || null, h("div", { class: "field-error", role: "alert" }));
}

function option(value, label, selected) {
  return h("option", { value, selected: value === selected }, label);
}

export async function formView(main, id) {
  const [handlers, job] = await Promise.all([
    get("/v1/handlers"), id ? get(`/v1/jobs/${encodeURIComponent(id)}`) : null]);
  const schedule = job ? job.schedule : { kind: "cron", expr: "0 */5 * * * *", timezone: "UTC" };
  const inputs = {
    name: h("input", { name: "name", required: true, value: job ? job.name : "", autocomplete: "off", placeholder: "nightly-report" }),
    handler: h("select", { name: "handler" }, handlers.items.map((hd) => option(hd.name, hd.name, job ? job.handler : "noop"))),
    kind: h("select", { name: "kind" }, option("cron", "cron", schedule.kind), option("interval", "interval", schedule.kind), option("once", "once", schedule.kind)),
    expr: h("input", { name: "expr", value: schedule.expr || "0 */5 * * * *", class: "mono", autocomplete: "off" }),
    timezone: h("input", { name: "timezone", value: schedule.timezone || "UTC", autocomplete: "off" }),
    every: h("input", { name: "every_seconds", type: "number", min: 1, step: "any", value: schedule.every_seconds || 60 }),
    at: h("input", { name: "at", type: "datetime-local", step: 1, value: schedule.at ? localInput(schedule.at) : "" }),
    params: h("textarea", { name: "params", rows: 5, class: "mono", spellcheck: "false" }),
    timeout: h("input", { name: "timeout_seconds", type: "number", step: "any", value: job ? job.timeout_seconds : 60 }),
    retries: h("input", { name: "max_retries", type: "number", value: job ? job.max_retries : 0 }),
    shards: h("input", { name: "shards", type: "number", min: 1, value: job ? job.shards : 1 }),
    priority: h("select", { name: "priority" }, ["critical", "high", "normal", "low"].map((p) => option(p, p, job ? job.priority : "normal"))),
    misfire: h("select", { name: "misfire" }, ["coalesce", "run_all", "skip"].map((p) => option(p, p, job ? job.misfire.policy : "coalesce"))),
    grace: h("input", { name: "grace_seconds", type: "number", step: "any", value: job ? job.misfire.grace_seconds : 60 }),
    enabled: h("input", { name: "enabled", type: "checkbox", checked: job ? job.enabled : true }),
  };
  inputs.params.value = JSON.stringify(job ? job.params : {}, null, 2);
  const words = h("div", { class: "hint", "data-testid": "schedule-words" });
  const paramsHint = h("div", { class: "hint" });
  const preview = h("div", { class: "preview" });
  const general = h("div", { class: "form-error", role: "alert" });
  const submit = h("button", { type: "submit", class: "primary" }, job ? "Save changes" : "Create job");

  const cronFields = h("div", { class: "row" }, field("schedule.expr", "Cron expression (seconds first)", inputs.expr), field("schedule.timezone", "Time zone", inputs.timezone));
  const intervalFields = h("div", { class: "row" }, field("schedule.every_seconds", "Every (seconds)", inputs.every));
  const onceFields = h("div", { class: "row" }, field("schedule.at", "At (your local time)", inputs.at));
  const form = h("form", { class: "panel job-form", novalidate: true },
    h("h2", {}, job ? `Edit ${job.name}` : "New job"),
    h("div", { class: "row" }, field("name", "Name", inputs.name), field("handler", "Handler", inputs.handler)),
    h("div", { class: "row" }, field("schedule", "Schedule", inputs.kind)),
    cronFields, intervalFields, onceFields, words,
    field("params", "Params (JSON)", inputs.params, paramsHint),
    h("div", { class: "row" }, field("timeout_seconds", "Timeout (s)", inputs.timeout), field("max_retries", "Retries", inputs.retries),
      field("shards", "Shards", inputs.shards), field("priority", "Priority", inputs.priority)),
    h("div", { class: "row" }, field("misfire.policy", "Missed runs", inputs.misfire), field("misfire.grace_seconds", "Grace (s)", inputs.grace),
      field("enabled", "Enabled", inputs.enabled)),
    general,
    h("div", { class: "form-actions" }, submit, h("a", { class: "button", href: job ? jobHash(job.id) : "#/jobs" }, "Cancel")));
  replace(main, h("div", { class: "columns form-layout" }, form,
    h("section", { class: "panel" }, h("h2", {}, "Next fire times"), preview)));

  function scheduleBody() {
    const kind = inputs.kind.value;
    if (kind === "cron") return { kind, expr: inputs.expr.value.trim(), timezone: inputs.timezone.value.trim() || "UTC" };
    if (kind === "interval") return { kind, every_seconds: Number(inputs.every.value) };
    const at = inputs.at.value ? new Date(inputs.at.value) : null;
    return { kind, at: at && !Number.isNaN(at.getTime()) ? at.toISOString() : inputs.at.value };
  }

  function showKind() {
    const kind = inputs.kind.value;
    cronFields.hidden = kind !== "cron";
    intervalFields.hidden = kind !== "interval";
    onceFields.hidden = kind !== "once";
    const body = scheduleBody();
    words.textContent = kind === "cron" ? cronInWords(body.expr) : kind === "interval" && body.every_seconds > 0 ? intervalInWords(body.every_seconds) : "";
  }

  function showParamsHint() {
    const handler = handlers.items.find((hd) => hd.name === inputs.handler.value);
    const props = handler && handler.params_schema && handler.params_schema.properties;
    if (!props) { paramsHint.textContent = "This handler takes any params."; return; }
    const required = new Set(handler.params_schema.required || []);
    const secret = new Set(handler.secret_params);
    paramsHint.textContent = "Params: " + Object.keys(props).map((name) =>
      `${name}${required.has(name) ? " (required)" : ""}${secret.has(name) ? " (secret)" : ""}`).join(", ");
  }

  function clearErrors(prefix) {
    for (const box of form.querySelectorAll(".field")) {
      if (prefix && !box.dataset.field.startsWith(prefix)) continue;
      box.classList.remove("invalid");
      box.querySelector(".field-error").textContent = "";
    }
    if (!prefix) general.textContent = "";
  }

  /** Each error beside its field: the closest field named by the error's path. */
  function showErrors(err) {
    const unplaced = [];
    for (const error of err.errors.length ? err.errors : [{ field: "body", reason: err.message }]) {
      let key = error.field;
      let box = null;
      while (key && !box) {
        box = form.querySelector(`.field[data-field="${CSS.escape(key)}"]`);
        key = key.includes(".") ? key.slice(0, key.lastIndexOf(".")) : "";
      }
      if (box) {
        box.classList.add("invalid");
        const text = box.querySelector(".field-error");
        // A preview landing after a save names the schedule's errors again: each is shown once.
        if (!text.textContent.includes(error.reason)) {
          text.textContent = text.textContent ? `${text.textContent}; ${error.reason}` : error.reason;
        }
      } else unplaced.push(`${error.field}: ${error.reason}`);
    }
    if (unplaced.length) general.textContent = unplaced.join("; ");
  }

  let timer = null;
  let asked = 0;
  function schedulePreview() {
    clearTimeout(timer);
    timer = setTimeout(async () => {
      const ticket = ++asked;
      try {
        const name = NAME.test(inputs.name.value.trim()) ? inputs.name.value.trim() : "preview";
        const data = await post("/v1/schedules/preview", { schedule: scheduleBody(), name, count: PREVIEW_COUNT });
        if (ticket !== asked) return;
        clearErrors("schedule");
        replace(preview, previewList(data.times));
      } catch (err) {
        if (ticket !== asked) return;
        clearErrors("schedule");
        replace(preview, h("p", { class: "muted" }, "No preview: the schedule is not valid yet."));
        if (!(err instanceof ApiError)) return;
        const scheduleErrors = err.errors.filter((e) => e.field.startsWith("schedule"));
        if (scheduleErrors.length) showErrors({ errors: scheduleErrors });
        const expr = err.errors.find((e) => e.field === "schedule.expr");
        if (expr && inputs.kind.value === "cron") words.textContent = `not a valid expression: ${expr.reason}`;
      }
    }, PREVIEW_DELAY_MS);
  }

  /** The job as the form holds it; `params` is the raw text, parsed only on save. */
  function formBody(params) {
    return {
      name: inputs.name.value.trim(), handler: inputs.handler.value, schedule: scheduleBody(), params,
      enabled: inputs.enabled.checked, timeout_seconds: Number(inputs.timeout.value),
      max_retries: Number(inputs.retries.value), shards: Number(inputs.shards.value),
      priority: inputs.priority.value,
      misfire: { policy: inputs.misfire.value, grace_seconds: Number(inputs.grace.value) },
    };
  }

  /** The create, or the PATCH of what changed at the revision read; `dryRun`: checked only. */
  function write(body, dryRun) {
    const query = dryRun ? "?dry_run=true" : "";
    return job
      ? api("PATCH", `/v1/jobs/${encodeURIComponent(job.id)}${query}`, changedFields(asRead, body), { "If-Match": `"${job.revision}"` })
      : post(`/v1/jobs${query}`, body);
  }

  /** `errors`, and those the server finds once the fields they name are put back as read. */
  async function everyError(body, errors) {
    const found = [...errors];
    const refused = new Set(errors.map((e) => topField(e.field)));
    for (let probe = 0; probe < MAX_PROBES; probe += 1) {
      const asked = { ...body };
      for (const key of refused) if (key in asRead) asked[key] = asRead[key];
      if (refused.has("name") && !asked.name) asked.name = PROBE_NAME;
      let more;
      try {
        await write(asked, true);
        return found;
      } catch (err) {
        if (!(err instanceof ApiError) || err.status !== 422) return found;
        more = err.errors.filter((e) => !refused.has(topField(e.field)));
      }
      if (!more.length) return found;
      found.push(...more);
      for (const e of more) refused.add(topField(e.field));
    }
    return found;
  }

  async function save(event) {
    event.preventDefault();
    clearErrors();
    let params = asRead.params;
    const local = [];
    try {
      params = JSON.parse(inputs.params.value || "{}");
    } catch (err) {
      local.push({ field: "params", reason: `not valid JSON: ${err.message}` });
    }
    const body = formBody(params);
    submit.disabled = true;
    try {
      if (local.length) {
        // Not sent: the params are no JSON. The other fields are checked all the same.
        showErrors({ errors: await everyError(body, local) });
        return;
      }
      const saved = await write(body, false);
      location.hash = jobHash(saved.id);
    } catch (err) {
      if (!(err instanceof ApiError)) throw err;
      showErrors(err.status === 422 ? { errors: await everyError(body, err.errors), message: err.message } : err);
    } finally {
      submit.disabled = false;
    }
  }

  form.addEventListener("submit", save);
  form.addEventListener("input", (event) => {
    if (event.target === inputs.params) return;
    showKind();
    if (event.target === inputs.handler) showParamsHint();
    if ([inputs.kind, inputs.expr, inputs.timezone, inputs.every, inputs.at, inputs.name].includes(event.target)) schedulePreview();
  });
  showKind();
  showParamsHint();
  // What the form showed before any edit, in the shape it sends: the baseline of a PATCH.
  const asRead = formBody(job ? job.params : {});
  schedulePreview();
  return null; // a form is not refreshed under the user's hands
}

/** The top-level field an error names: `schedule` for `schedule.expr`. */
function topField(path) {
  return path.split(".")[0];
}

function localInput(iso) {
  const date = new Date(iso);
  const local = new Date(date.getTime() - date.getTimezoneOffset() * 60000);
  return local.toISOString().slice(0, 19);
}

/** The top-level fields of `body` that differ from `before`; `schedule` and `misfire` go whole
 * (the API replaces them whole), and so does `params`. */
export function changedFields(before, body) {
  const changed = {};
  for (const [key, value] of Object.entries(body)) {
    if (JSON.stringify(value) !== JSON.stringify(before[key])) changed[key] = value;
  }
  return changed;
}
