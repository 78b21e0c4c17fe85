// A schedule in words: "every 5 minutes", "at 02:30, Monday to Friday (Europe/Berlin)".
// Six cron fields, seconds first (five mean second 0); H is a value tickd picks from the job's
// name. What is not recognised is described field by field, never guessed; a step or a number
// the server refuses (`*/70` seconds) gets its refusal, never words.

import { dateTime } from "./format.js";

const DAYS = ["Sunday", "Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday"];
const DAY_NAMES = { SUN: 0, MON: 1, TUE: 2, WED: 3, THU: 4, FRI: 5, SAT: 6 };
const MONTHS = ["January", "February", "March", "April", "May", "June", "July", "August",
  "September", "October", "November", "December"];
const MONTH_NAMES = Object.fromEntries(
  MONTHS.map((m, i) => [m.slice(0, 3).toUpperCase(), i + 1]));

const isNumber = (field) => /^[0-9]{1,2}$/.test(field);
const step = (field) => {
  const match = /^(?:\*|0)\/([0-9]{1,4})$/.exec(field);
  return match ? Number(match[1]) : null;
};
const pad = (n) => String(n).padStart(2, "0");
const plural = (n, unit) => (n === 1 ? `every ${unit}` : `every ${n} ${unit}s`);

export function scheduleInWords(schedule) {
  if (!schedule) return "";
  if (schedule.kind === "interval") return intervalInWords(schedule.every_seconds);
  if (schedule.kind === "once") return `once, at ${dateTime(schedule.at)}`;
  const words = cronInWords(schedule.expr);
  const tz = schedule.timezone && schedule.timezone !== "UTC" ? schedule.timezone : "UTC";
  return `${words} (${tz})`;
}

export function scheduleAsWritten(schedule) {
  if (!schedule) return "";
  if (schedule.kind === "cron") return schedule.expr;
  if (schedule.kind === "interval") return `every ${schedule.every_seconds} s`;
  return schedule.at;
}

export function intervalInWords(total) {
  for (const [size, unit] of [[86400, "day"], [3600, "hour"], [60, "minute"]]) {
    if (total >= size && total % size === 0) return plural(total / size, unit);
  }
  return plural(Number(total.toFixed(3)), "second");
}

// The fields whose numbers and steps are checked here, as the server checks them: name, size.
const CHECKED = [["second", 60], ["minute", 60], ["hour", 24]];

/** Why the server refuses the seconds, minutes or hours of `expr`; null when it takes them. */
export function cronRefusal(expr) {
  const fields = String(expr).trim().split(/\s+/);
  if (fields.length === 5) fields.unshift("0");
  if (fields.length !== 6) return null;
  for (const [index, [unit, size]] of CHECKED.entries()) {
    for (const part of fields[index].split(",")) {
      const refusal = partRefusal(part, unit, size);
      if (refusal) return refusal;
    }
  }
  return null;
}

function partRefusal(part, unit, size) {
  const [range, by] = part.split("/");
  if (by !== undefined && /^[0-9]+$/.test(by)) {
    const n = Number(by);
    if (n === 0) return `${unit} field: step 0 must be a whole number from 1`;
    if (n > size) {
      return `${unit} field: step ${n} is longer than the field, which has ${size} values `
        + `(0-${size - 1}): it would fire once a cycle, not every ${n}`;
    }
  }
  for (const bound of range.split("-")) {
    if (/^[0-9]+$/.test(bound) && Number(bound) >= size) {
      return `${unit} field: ${bound} is out of range 0-${size - 1}`;
    }
  }
  return null;
}

export function cronInWords(expr) {
  const refusal = cronRefusal(expr);
  if (refusal) return `not a valid expression: ${refusal}`;
  const fields = String(expr).trim().split(/\s+/);
  if (fields.length === 5) fields.unshift("0");
  if (fields.length !== 6) return String(expr);
  const [sec, min, hour, dom, month, dow] = fields.map((f) => f.toUpperCase());
  const time = timeInWords(sec, min, hour);
  const days = daysInWords(dom, month, dow);
  if (!days && time.startsWith("at ")) return `${time} every day`;
  return days ? `${time}, ${days}` : time;
}

function timeInWords(sec, min, hour) {
  if (isNumber(sec) && isNumber(min) && isNumber(hour)) {
    return `at ${pad(hour)}:${pad(min)}${sec === "0" ? "" : `:${pad(sec)}`}`;
  }
  if (hour === "*" && min === "*") {
    if (sec === "*") return "every second";
    if (step(sec)) return plural(step(sec), "second");
    if (isNumber(sec)) return sec === "0" ? "every minute" : `every minute, at second ${sec}`;
  }
  if (hour === "*" && isNumber(sec)) {
    const at = sec === "0" ? "" : `, at second ${sec}`;
    if (step(min)) return plural(step(min), "minute") + at;
    if (isNumber(min)) return `every hour at minute ${min}${at}`;
    if (min === "H") return "every hour, at a minute picked from the job's name";
  }
  if (isNumber(sec) && isNumber(min) && step(hour)) {
    return `${plural(step(hour), "hour")}, at minute ${min}`;
  }
  return [field(sec, "second"), field(min, "minute"), field(hour, "hour")]
    .filter(Boolean).join(", ");
}

function field(value, unit) {
  if (value === "*") return `every ${unit}`;
  if (value === "H") return `a ${unit} picked from the job's name`;
  if (step(value)) return plural(step(value), unit);
  return `${unit} ${value.toLowerCase()}`;
}

function daysInWords(dom, month, dow) {
  const parts = [];
  if (dow !== "*" && dow !== "?") parts.push(weekdays(dow));
  if (dom !== "*" && dom !== "?") parts.push(dom === "L" ? "on the last day of the month"
    : `on day ${dom.toLowerCase()} of the month`);
  if (month !== "*") parts.push(`in ${listOf(month, MONTH_NAMES, (n) => MONTHS[n - 1])}`);
  return parts.join(", ");
}

function weekdays(dow) {
  if (dow === "1-5" || dow === "MON-FRI") return "Monday to Friday";
  if (dow === "0,6" || dow === "6,0" || dow === "SAT,SUN" || dow === "SUN,SAT") return "on weekends";
  return `on ${listOf(dow, DAY_NAMES, (n) => DAYS[n % 7])}`;
}

/** "1,3" -> "Monday and Wednesday"; "1-3" -> "Monday to Wednesday"; else as written. */
function listOf(value, names, name) {
  const number = (part) => (part in names ? names[part] : (/^[0-9]+$/.test(part) ? Number(part) : null));
  const items = value.split(",").map((part) => {
    const [from, to] = part.split("-");
    const a = number(from);
    const b = to === undefined ? a : number(to);
    if (a === null || b === null || (to !== undefined && b < a)) return null;
    return to === undefined ? name(a) : `${name(a)} to ${name(b)}`;
  });
  if (items.some((item) => item === null || item === undefined)) return value.toLowerCase();
  return items.length === 1 ? items[0]
    : `${items.slice(0, -1).join(", ")} and ${items[items.length - 1]}`;
}
