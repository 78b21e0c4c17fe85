// The zone times are shown in: a switch in the page header (UTC, the browser's zone, and on a
// job's page the job's own), and the labels that go with it. Views write times with format.js's
// dateTime, which shows them in the chosen zone; this module watches the page so that, whatever
// view drew a time, the column header or the label above it names the zone and hovering the time
// gives its instant in UTC.

import {
  ZONE_CHOICES, browserZone, chooseZone, instantShown, jobZoneHere, zoneChoice, zoneLabel,
} from "./format.js";

// A time as dateTime writes it: 2026-12-07 03:00:00 UTC, ... EST, ... UTC+5:30.
const SHOWN_TIME = /\d{4}-\d\d-\d\d \d\d:\d\d:\d\d [A-Z]{1,5}(?:[+-]\d{1,2}(?::\d\d)?)?/g;
// Forms are not drawn again when the zone changes: what was typed in them stays.
const FORM_PAGE = /^#\/(?:new|jobs\/[^/]+\/edit)$/;

const box = document.getElementById("time-zone");
const select = document.createElement("select");

function optionText(choice) {
  if (choice === "utc") return "UTC";
  if (choice === "local") return `Local (${browserZone()})`;
  const zone = jobZoneHere();
  return zone ? `Job's zone (${zone})` : "Job's zone (on a job's page)";
}

function drawSwitch() {
  const options = ZONE_CHOICES.map((choice) => {
    const option = document.createElement("option");
    option.value = choice;
    option.textContent = optionText(choice);
    option.disabled = choice === "job" && !jobZoneHere() && zoneChoice() !== "job";
    return option;
  });
  select.replaceChildren(...options);
  select.value = zoneChoice();
}

function buildSwitch() {
  const label = document.createElement("label");
  label.className = "zone-switch";
  const words = document.createElement("span");
  words.textContent = "Times in";
  select.setAttribute("aria-label", "Show times in");
  select.dataset.testid = "time-zone";
  select.addEventListener("change", () => {
    chooseZone(select.value);
    // The open view drawn again, in the new zone (app.js draws the page on hashchange).
    if (!FORM_PAGE.test(location.hash)) window.dispatchEvent(new HashChangeEvent("hashchange"));
  });
  label.append(words, select);
  box.replaceChildren(label);
  drawSwitch();
}

/** Every element showing an absolute time: its tooltip the UTC instant, its column's header
 * (or its term, in a list of facts) labelled with the zone. */
function labelTimes() {
  const label = zoneLabel();
  const walker = document.createTreeWalker(document.getElementById("main"), NodeFilter.SHOW_TEXT);
  const seen = new Set();
  for (let node = walker.nextNode(); node; node = walker.nextNode()) {
    const shown = (node.data.match(SHOWN_TIME) || []).filter((text) => instantShown(text));
    if (!shown.length || seen.has(node.parentElement)) continue;
    seen.add(node.parentElement);
    giveInstant(node.parentElement, shown);
    labelHeading(node.parentElement, label);
  }
}

function giveInstant(element, shown) {
  const instants = shown.map((text) => instantShown(text)).join(" to ");
  if (element.dataset.zoneTitle === undefined) {
    // A title of its own (what a link leads to) is kept after the instant; one that is only the
    // time again is not.
    const own = element.getAttribute("title") || "";
    element.dataset.zoneTitle = instantShown(own) || SHOWN_TIME.test(own) ? "" : own;
    SHOWN_TIME.lastIndex = 0;
  }
  const own = element.dataset.zoneTitle;
  const title = own ? `${instants} · ${own}` : instants;
  if (element.getAttribute("title") !== title) element.setAttribute("title", title);
}

function labelHeading(element, label) {
  const cell = element.closest("td, dd");
  if (!cell) return;
  const heading = cell.tagName === "DD" ? previousTerm(cell) : columnHeader(cell);
  if (!heading) return;
  let mark = heading.querySelector(":scope > .zone-label");
  if (!mark) {
    mark = document.createElement("span");
    mark.className = "zone-label";
    heading.append(mark);
  }
  if (mark.textContent !== ` (${label})`) mark.textContent = ` (${label})`;
}

function previousTerm(dd) {
  const term = dd.previousElementSibling;
  return term && term.tagName === "DT" ? term : null;
}

function columnHeader(td) {
  const table = td.closest("table");
  const head = table && table.tHead && table.tHead.rows[0];
  return head ? head.cells[td.cellIndex] || null : null;
}

let pending = false;
function soon() {
  if (pending) return;
  pending = true;
  requestAnimationFrame(() => {
    pending = false;
    labelTimes();
  });
}

if (box) {
  buildSwitch();
  new MutationObserver(soon).observe(document.getElementById("main"), {
    childList: true, subtree: true, characterData: true,
  });
  window.addEventListener("tickd:time-zone", () => { drawSwitch(); soon(); });
  window.addEventListener("hashchange", () => { drawSwitch(); soon(); });
}
