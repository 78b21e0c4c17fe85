// Keyboard shortcuts, as in mail and code-review tools: "g" then a letter goes to a page, "/"
// focuses the search box, "?" lists them all. Keys typed into a field, or held with Ctrl, Alt
// or Meta, stay the browser's and the field's.

import { h } from "./dom.js";

const PAGES = { n: ["#/now", "Now"], j: ["#/jobs", "Jobs"], d: ["#/dead-letters", "Dead letters"] };
// How long "g" waits for its second key.
const CHORD_MS = 1500;
const SEARCH = "input[type='search']";

let chordUntil = 0;
let searchWanted = false;

export const SHORTCUTS = [
  ...Object.entries(PAGES).map(([key, [, name]]) => [`g ${key}`, `Go to ${name}`]),
  ["/", "Search jobs"],
  ["?", "Show these shortcuts"],
  ["Esc", "Close this list"],
];

export function listenForShortcuts() {
  document.addEventListener("keydown", onKey);
}

/** After a page is drawn: the search box "/" asked for, once the Jobs page holds it. */
export function focusSearchIfWanted() {
  const box = document.querySelector(SEARCH);
  if (searchWanted && box) {
    searchWanted = false;
    box.focus();
  }
}

function onKey(event) {
  if (event.ctrlKey || event.altKey || event.metaKey || typing(event.target)) return;
  const chord = Date.now() < chordUntil;
  chordUntil = 0;
  if (chord && PAGES[event.key]) {
    event.preventDefault();
    location.hash = PAGES[event.key][0];
  } else if (event.key === "g") {
    chordUntil = Date.now() + CHORD_MS;
  } else if (event.key === "/") {
    event.preventDefault();
    focusSearch();
  } else if (event.key === "?") {
    event.preventDefault();
    showShortcuts();
  }
}

function typing(target) {
  return target instanceof HTMLElement
    && (target.isContentEditable || ["INPUT", "SELECT", "TEXTAREA"].includes(target.tagName));
}

function focusSearch() {
  const box = document.querySelector(SEARCH);
  if (box) {
    box.focus();
    return;
  }
  searchWanted = true;
  location.hash = PAGES.j[0];
}

export function showShortcuts() {
  let dialog = document.getElementById("shortcuts");
  if (!dialog) {
    dialog = h("dialog", { id: "shortcuts", class: "shortcuts", "aria-labelledby": "shortcuts-title" },
      h("h2", { id: "shortcuts-title" }, "Keyboard shortcuts"),
      h("dl", { class: "facts" }, SHORTCUTS.map(([keys, what]) => [
        h("dt", {}, keys.split(" ").map((k) => h("kbd", {}, k))), h("dd", {}, what)])),
      h("form", { method: "dialog" }, h("button", { type: "submit" }, "Close")));
    document.body.append(dialog);
  }
  if (!dialog.open) dialog.showModal();
}
