// The domain the dashboard shows: a switch in the page header, "All domains" or one of those
// GET /v1/domains names (those the token reaches), kept for the tab. Each view reads its lists
// and figures through api.js, which names the chosen domain in every read of jobs and runs and
// in the bulk actions on dead letters; so every view shows that domain's jobs and runs only.

import { chooseDomain, chosenDomain, get } from "./api.js";
import { h, replace } from "./dom.js";

const box = document.getElementById("domain");

/** Draw the switch (again) from the domains the API has now; hidden while there is only one
 * domain to show and none chosen. */
export async function drawDomainSwitch() {
  const names = (await get("/v1/domains")).items.map((domain) => domain.name);
  const chosen = chosenDomain();
  if (chosen && !names.includes(chosen)) names.push(chosen);
  if (names.length < 2 && !chosen) {
    replace(box);
    return;
  }
  const select = h("select", { "aria-label": "Show the domain", "data-testid": "domain", onchange: switched },
    h("option", { value: "" }, "All domains"),
    names.sort().map((name) => h("option", { value: name, selected: name === chosen }, name)));
  replace(box, h("label", {}, h("span", {}, "Domain"), select));
}

function switched(event) {
  chooseDomain(event.target.value);
  // The open view drawn again, of the chosen domain (app.js draws the page on hashchange).
  window.dispatchEvent(new HashChangeEvent("hashchange"));
}
