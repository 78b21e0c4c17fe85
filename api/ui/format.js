// Times, durations and schedules as people read them.

let serverSkewMs = 0; // the daemon's clock minus the browser's, from /v1/stats

export function setServerNow(iso) {
  serverSkewMs = Date.parse(iso) - Date.now();
}

export function now() {
  return Date.now() + serverSkewMs;
}

// Every absolute time is shown in one zone, labelled with it: UTC (as the API, the CLI and the
// logs have it) unless the person chose their browser's zone or, on a job's page, the job's.
// The choice is kept in localStorage; timezone.js draws the switch and labels the headers.

const ZONE_KEY = "tickd.time-zone";
export const ZONE_CHOICES = ["utc", "local", "job"];
let chosen = storedChoice();
let jobZone = null; // { hash, zone }: the zone of the job whose page is open
const shownAs = new Map(); // a time as shown -> its instant in UTC, for tooltips
const SHOWN_KEPT = 5000;

function storedChoice() {
  try {
    const value = localStorage.getItem(ZONE_KEY);
    return ZONE_CHOICES.includes(value) ? value : "utc";
  } catch {
    return "utc"; // storage refused (a private window's policy): UTC
  }
}

export function zoneChoice() {
  return chosen;
}

export function chooseZone(choice) {
  if (!ZONE_CHOICES.includes(choice)) return;
  chosen = choice;
  shownAs.clear();
  try {
    localStorage.setItem(ZONE_KEY, choice);
  } catch {
    // kept for this page only
  }
  window.dispatchEvent(new CustomEvent("tickd:time-zone"));
}

/** The page at this address is a job's whose schedule runs in `zone` (UTC when it has none). */
export function setJobZone(zone) {
  const changed = jobZoneHere() !== (zone || "UTC");
  jobZone = { hash: location.hash, zone: zone || "UTC" };
  if (changed) window.dispatchEvent(new CustomEvent("tickd:time-zone"));
}

/** The zone of the job whose page is open; null on any other page. */
export function jobZoneHere() {
  return jobZone && jobZone.hash === location.hash ? jobZone.zone : null;
}

export function browserZone() {
  return Intl.DateTimeFormat().resolvedOptions().timeZone || "UTC";
}

/** The IANA zone times are shown in: the job's only on its page, else UTC. */
export function shownZone() {
  if (chosen === "local") return browserZone();
  if (chosen === "job") return jobZoneHere() || "UTC";
  return "UTC";
}

const formats = new Map();

function formatIn(locale, zone) {
  const key = `${locale} ${zone}`;
  if (!formats.has(key)) {
    formats.set(key, new Intl.DateTimeFormat(locale, {
      timeZone: zone, year: "numeric", month: "2-digit", day: "2-digit",
      hour: "2-digit", minute: "2-digit", second: "2-digit", hourCycle: "h23", timeZoneName: "short",
    }));
  }
  return formats.get(key);
}

function partsIn(date, zone) {
  const parts = {};
  for (const part of formatIn("en-US", zone).formatToParts(date)) parts[part.type] = part.value;
  parts.timeZoneName = abbreviation(parts.timeZoneName, date, zone);
  return parts;
}

/** EST, CET, UTC; an offset (UTC+9) for a zone with no abbreviation in English. */
function abbreviation(name, date, zone) {
  if (!/^GMT[+-]/.test(name)) return name === "GMT" && zone === "UTC" ? "UTC" : name;
  const british = formatIn("en-GB", zone).formatToParts(date).find((p) => p.type === "timeZoneName");
  if (british && !/^(GMT|UTC)[+-]/.test(british.value)) return british.value;
  return name.replace(/^GMT/, "UTC");
}

/** The UTC instant, to the second: 2026-12-07T03:00:00Z. */
export function utcInstant(iso) {
  return new Date(iso).toISOString().replace(/\.000Z$/, "Z");
}

/** The instant in UTC of a time as dateTime showed it; undefined for any other text. */
export function instantShown(text) {
  return shownAs.get(text);
}

/** 2026-12-07 03:00:00 UTC, 2026-12-07 04:00:00 CET: the chosen zone, 24 hours, labelled. */
export function dateTime(iso) {
  if (!iso) return "—";
  const date = new Date(iso);
  if (Number.isNaN(date.getTime())) return String(iso);
  const p = partsIn(date, shownZone());
  const text = `${p.year}-${p.month}-${p.day} ${p.hour}:${p.minute}:${p.second} ${p.timeZoneName}`;
  if (shownAs.size >= SHOWN_KEPT) shownAs.clear();
  shownAs.set(text, utcInstant(iso));
  return text;
}

/** 03:00 UTC: the hour and minute in the chosen zone, labelled. */
export function clock(iso) {
  const p = partsIn(new Date(iso), shownZone());
  return `${p.hour}:${p.minute} ${p.timeZoneName}`;
}

/** The label of the zone times are shown in now: UTC, EST, CET, UTC+9. */
export function zoneLabel() {
  return partsIn(new Date(now()), shownZone()).timeZoneName;
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
