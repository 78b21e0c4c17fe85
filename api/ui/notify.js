// One line of feedback after an action, gone after a few seconds.

import { h } from "./dom.js";

export function notify(message, tone) {
  let area = document.getElementById("notices");
  if (!area) {
    area = h("div", { id: "notices", role: "status" });
    document.body.append(area);
  }
  const notice = h("div", { class: `notice ${tone || ""}` }, message);
  area.append(notice);
  setTimeout(() => notice.remove(), tone === "error" ? 8000 : 4000);
}
