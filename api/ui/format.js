// Times, durations and schedules as people read them.

let serverSkewMs = 0; // the daemon's clock minus the browser's, from /v1/stats

export function setServerNow(iso) {
  serverSkewMs = Date.parse(iso) - Date.now();
}

export function now() {
  return Date.now() + serverSkewMs;
}

const TIME = new Intl.DateTimeFormat(undefined, {
  month: "short", day: "numeric", hour: "2-digit", minute: "2-digit", second: "2-digit",
});
const CLOCK = new Intl.DateTimeFormat(undefined, { hour: "2-digit", minute: "2-digit" });

export function dateTime(iso) {
  return iso ? TIME.format(new Date(iso)) : "—";
}

export function clock(iso) {
  return CLOCK.format(new Date(iso));
}

export function relative(iso) {
  if (!iso) return "—";
  const seconds = Math.round((Date.parse(iso) - now()) / 1000);
  const text = span(Math.abs(seconds));
  if (Math.abs(seconds) < 1) return "now";
  return seconds > 0 ? `in ${text}` : `${text} ago`;
}

/** 42 s, 3 min, 2 h 5 min, 3 d. */
export function span(seconds) {
  if (seconds < 60) return `${Math.round(seconds)} s`;
  if (seconds < 3600) return `${Math.round(seconds / 60)} min`;
  if (seconds < 86400) {
    const minutes = Math.round((seconds % 3600) / 60);
    return `${Math.floor(seconds / 3600)} h${minutes ? ` ${minutes} min` : ""}`;
  }
  return `${Math.round(seconds / 86400)} d`;
}

export function millis(ms) {
  if (ms === null || ms === undefined) return "—";
  if (ms < 1) return "<1 ms";
  if (ms < 1000) return `${Math.round(ms)} ms`;
  return seconds(ms / 1000);
}

export function seconds(value) {
  if (value === null || value === undefined) return "—";
  if (value < 1) return `${Math.round(value * 1000)} ms`;
  if (value < 60) return `${value.toFixed(value < 10 ? 2 : 1)} s`;
  return span(value);
}

export function lagSeconds(execution) {
  if (!execution.started_at || execution.status === "skipped") return null; // never started
  return Math.max(0, (Date.parse(execution.started_at) - Date.parse(execution.scheduled_at)) / 1000);
}
