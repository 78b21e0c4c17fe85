// When tickd does not answer (a restart, a deploy, a dropped network) the dashboard keeps the view
// it has, says so in a banner with the time of the next try, and tries again by itself: after
// 1 s, then twice as long each time up to 30 s. Each wait is jittered so that the dashboards left
// open on many screens do not all call at the same instant when the daemon comes back.

import { ApiError } from "./api.js";
import { h, replace } from "./dom.js";

export const RETRY_FIRST_MS = 1000;
export const RETRY_MAX_MS = 30_000;
const JITTER = 0.2;
// A proxy in front of a stopped daemon answers one of these.
const GATEWAY_DOWN = [502, 503, 504];

let delay = 0;
let retryTimer = null;
let countdown = null;

/** Whether `err` says tickd is out of reach, rather than that it answered and refused. */
export function unreachable(err) {
  return err instanceof ApiError && (err.status === 0 || GATEWAY_DOWN.includes(err.status));
}

/** The wait before the next try: double the last one, from 1 s up to 30 s, ±20 %. */
export function nextWait(previous, random = Math.random) {
  const base = previous ? Math.min(previous * 2, RETRY_MAX_MS) : RETRY_FIRST_MS;
  return [base, Math.min(RETRY_MAX_MS, Math.round(base * (1 - JITTER + 2 * JITTER * random())))];
}

/** Shows the banner and calls `retry` after the next wait (or at once, on "Try now"). */
export function reconnectLater(retry, err) {
  clearTimeout(retryTimer);
  clearInterval(countdown);
  let wait;
  [delay, wait] = nextWait(delay);
  const at = Date.now() + wait;
  const now = () => {
    clearTimeout(retryTimer);
    clearInterval(countdown);
    drawTrying();
    retry();
  };
  retryTimer = setTimeout(now, wait);
  const left = drawWaiting(err, now);
  const count = () => { left.textContent = `Next try in ${Math.max(0, Math.ceil((at - Date.now()) / 1000))} s.`; };
  count();
  countdown = setInterval(count, 1000);
}

/** tickd answered: the banner goes and the next outage starts again from 1 s. */
export function connected() {
  delay = 0;
  clearTimeout(retryTimer);
  clearInterval(countdown);
  retryTimer = null;
  const box = banner();
  box.hidden = true;
  replace(box);
}

/** The banner, with an empty place for the countdown, which it returns. */
function drawWaiting(err, tryNow) {
  const left = h("span", { "data-testid": "next-try" });
  const box = banner();
  box.hidden = false;
  replace(box,
    h("strong", {}, "Reconnecting…"),
    h("span", {}, ` tickd is not answering (${err.message}). `), left,
    h("button", { type: "button", onclick: tryNow }, "Try now"));
  return left;
}

function drawTrying() {
  const box = banner();
  box.hidden = false;
  replace(box, h("strong", {}, "Reconnecting…"), h("span", {}, " trying now."));
}

function banner() {
  return document.getElementById("connection");
}
