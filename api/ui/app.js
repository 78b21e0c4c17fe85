// The dashboard's shell: routes (#/now, #/jobs, #/jobs/<id>, #/jobs/<id>/edit, #/new,
// #/dead-letters?<filters>, #/running, #/instances, #/runs?<filters>, #/runs/<execution id>), the
// token (asked for when the API says 401, kept in sessionStorage only), a refresh every few
// seconds of whatever view is open, and the wait for a daemon that stopped answering
// (connection.js), after which the view is drawn again.

import { ApiError, get, setToken, token } from "./api.js";
import { connected, reconnectLater, unreachable } from "./connection.js";
import { deadLetterFilters, deadLettersView } from "./dead_letters.js";
import { drawDomainSwitch } from "./domain.js";
import { h, replace } from "./dom.js";
import { formView } from "./form.js";
import { instancesView } from "./instances.js";
import { jobView } from "./job.js";
import { jobsView } from "./jobs.js";
import { focusSearchIfWanted, listenForShortcuts, showShortcuts } from "./keys.js";
import { nowView } from "./now.js";
import { runView } from "./run.js";
import { runningView } from "./running.js";
import { runsFilters, runsView } from "./runs.js";
import { loadSession, session } from "./session.js";

const REFRESH_MS = 5000;
const main = document.getElementById("main");
let refresh = null;
let generation = 0;
let versionShown = false;

function route() {
  const [path, query] = splitHash(location.hash);
  const parts = path.split("/").map(decoded);
  if (parts.includes(null)) return ["", () => notFound()];
  if (parts[0] === "dead-letters" && parts.length === 1) {
    return ["dead-letters", () => deadLettersView(main, deadLetterFilters(new URLSearchParams(query)))];
  }
  if (parts[0] === "running" && parts.length === 1) return ["running", () => runningView(main)];
  if (parts[0] === "instances" && parts.length === 1) return ["instances", () => instancesView(main)];
  if (parts[0] === "runs" && parts.length === 1) return ["runs", () => runsView(main, runsFilters(new URLSearchParams(query)))];
  if (parts[0] === "runs" && parts[1] && parts.length === 2) return ["", () => runView(main, parts[1])];
  if (parts[0] === "jobs" && parts[1] && parts[2] === "edit") return ["jobs", () => formView(main, parts[1])];
  if (parts[0] === "jobs" && parts[1]) return ["jobs", () => jobView(main, parts[1])];
  if (parts[0] === "jobs") return ["jobs", () => jobsView(main)];
  if (parts[0] === "new") return ["jobs", () => formView(main, null)];
  return ["now", () => nowView(main)];
}

/** The page's path and its query: `#/dead-letters?handler=ping` is ["dead-letters", "handler=ping"]. */
function splitHash(hash) {
  const bare = hash.replace(/^#\/?/, "");
  const mark = bare.indexOf("?");
  return mark < 0 ? [bare, ""] : [bare.slice(0, mark), bare.slice(mark + 1)];
}

// A hash typed or pasted by hand may hold a broken %-escape (`%E0%A4%A`): that part names no
// page, rather than throwing URIError out of the router.
function decoded(part) {
  try {
    return decodeURIComponent(part);
  } catch {
    return null;
  }
}

function notFound() {
  replace(main, h("section", { class: "panel", "data-testid": "not-found" },
    h("h2", {}, "No such page"),
    h("p", { class: "muted" }, "This address names no page of the dashboard."),
    h("a", { href: "#/now" }, "Go to the overview")));
  return null;
}

async function show() {
  const mine = ++generation;
  refresh = null;
  try {
    const [tab, view] = route();
    for (const a of document.querySelectorAll("[data-nav]")) a.classList.toggle("active", a.dataset.nav === tab);
    if (session.actor === null) {
      await loadSession();
      await drawDomainSwitch();
    }
    drawSession();
    const again = await view();
    connected();
    if (mine !== generation) return;
    refresh = again;
    focusSearchIfWanted();
    showVersion();
  } catch (err) {
    if (mine === generation) failed(err);
  }
}

function failed(err) {
  if (unreachable(err)) {
    // The view on screen stays as it was; only the banner says it is not current.
    refresh = null;
    reconnectLater(reconnect, err);
    return;
  }
  connected();
  if (err instanceof ApiError && err.status === 401) return login(token() ? "That token was not accepted." : "");
  replace(main, h("section", { class: "panel" }, h("h2", {}, "Something went wrong"),
    h("p", { class: "error-text" }, err.message || String(err))));
}

/** One cheap call first: the view is drawn again only once tickd answers, so each failed try
 * leaves the page as it was rather than blank. */
async function reconnect() {
  try {
    await loadSession();
  } catch (err) {
    failed(err);
    return;
  }
  versionShown = false;  // a restart may have been an upgrade
  show();
}

/** The daemon's version, from its API description, in the footer. */
async function showVersion() {
  if (versionShown) return;
  versionShown = true;
  try {
    const doc = await get("/openapi.json");
    document.getElementById("version").textContent = `tickd ${doc.info.version}`;
  } catch {
    versionShown = false;  // tried again after the next page drawn
  }
}

function drawSession() {
  const box = document.getElementById("session");
  if (!token()) {
    replace(box, h("span", { class: "muted" }, session.actor === "anonymous" ? "open API (loopback, no tokens)" : ""));
    return;
  }
  replace(box, h("span", {}, `${session.actor} · ${session.scope}`),
    h("button", { type: "button", class: "link", onclick: () => { setToken(""); session.actor = null; login(""); } }, "Sign out"));
}

function login(message) {
  refresh = null;
  replace(document.getElementById("session"));
  const input = h("input", { type: "password", name: "token", autocomplete: "off", required: true, "aria-label": "API token" });
  const form = h("form", { class: "panel login" },
    h("h2", {}, "Sign in"),
    h("p", { class: "muted" }, "This tickd asks for an API token. It is kept in this browser tab only."),
    h("label", {}, h("span", { class: "label" }, "Token"), input),
    h("p", { class: "error-text" }, message || ""),
    h("button", { type: "submit", class: "primary" }, "Sign in"));
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    setToken(input.value.trim());
    session.actor = null;
    show();
  });
  replace(main, form);
  input.focus();
}

async function tick() {
  // Not while the tab is hidden, nor under a user's hands in a form.
  if (!refresh || document.hidden) return;
  const mine = generation;
  try {
    await refresh();
  } catch (err) {
    if (mine === generation) failed(err);
  }
}

window.addEventListener("hashchange", show);
document.getElementById("show-shortcuts").addEventListener("click", showShortcuts);
listenForShortcuts();
setInterval(tick, REFRESH_MS);
show();
