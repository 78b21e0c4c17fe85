// The /v1 client: the bearer token lives in sessionStorage only (gone with the tab), every write
// is a JSON body sent as application/json, and a problem (RFC 9457) comes back as an ApiError
// that names the fields at fault.

const TOKEN_KEY = "tickd.token";

export function token() {
  return sessionStorage.getItem(TOKEN_KEY) || "";
}

export function setToken(value) {
  if (value) sessionStorage.setItem(TOKEN_KEY, value);
  else sessionStorage.removeItem(TOKEN_KEY);
}

// The domain the dashboard shows (domain.js, the switch), "" for every domain; kept for the tab.
const DOMAIN_KEY = "tickd.domain";
// The reads it narrows: every list and figure of jobs and their runs.
const READS_BY_DOMAIN = new Set([
  "/v1/jobs", "/v1/executions", "/v1/dead-letters", "/v1/dead-letters/groups", "/v1/running", "/v1/stats",
]);
// The bulk actions that act on what a filter matches: the filter names the domain too.
const ACTIONS_BY_DOMAIN = new Set(["/v1/dead-letters/redrive", "/v1/dead-letters/discard"]);

export function chosenDomain() {
  return sessionStorage.getItem(DOMAIN_KEY) || "";
}

export function chooseDomain(name) {
  if (name) sessionStorage.setItem(DOMAIN_KEY, name);
  else sessionStorage.removeItem(DOMAIN_KEY);
}

/** The path and body as sent: those READS_BY_DOMAIN and ACTIONS_BY_DOMAIN name the chosen
 * domain, unless they name one already. */
function inDomain(method, path, body) {
  const domain = chosenDomain();
  const url = new URL(path, location.origin);
  if (!domain || url.searchParams.has("domain")) return [path, body];
  if (method === "GET" && READS_BY_DOMAIN.has(url.pathname)) {
    url.searchParams.set("domain", domain);
    return [url.pathname + url.search, body];
  }
  if (method === "POST" && ACTIONS_BY_DOMAIN.has(url.pathname)) return [path, { domain, ...(body || {}) }];
  return [path, body];
}

export class ApiError extends Error {
  constructor(status, problem) {
    super((problem && (problem.detail || problem.title)) || `HTTP ${status}`);
    this.status = status;
    this.errors = (problem && Array.isArray(problem.errors)) ? problem.errors : [];
  }
}

export async function api(method, asked, given, extraHeaders) {
  const [path, body] = inDomain(method, asked, given);
  const headers = { Accept: "application/json", ...(extraHeaders || {}) };
  const bearer = token();
  if (bearer) headers.Authorization = `Bearer ${bearer}`;
  const init = { method, headers, cache: "no-store", credentials: "omit", redirect: "error" };
  if (method !== "GET") {
    headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(body === undefined ? {} : body);
  }
  let response;
  try {
    response = await fetch(path, init);
  } catch (err) {
    throw new ApiError(0, { title: "tickd cannot be reached", detail: String(err.message || err) });
  }
  if (response.status === 204) return null;
  const data = await response.json().catch(() => null);
  if (!response.ok) throw new ApiError(response.status, data);
  return data;
}

export const get = (path) => api("GET", path);
export const post = (path, body) => api("POST", path, body);

/** Every page of a listing, up to `maxPages` (a dashboard shows thousands, not millions). */
export async function all(path, maxPages = 10) {
  const items = [];
  let cursor = null;
  for (let page = 0; page < maxPages; page += 1) {
    const sep = path.includes("?") ? "&" : "?";
    const data = await get(cursor ? `${path}${sep}cursor=${encodeURIComponent(cursor)}` : path);
    items.push(...data.items);
    cursor = data.next_cursor;
    if (!cursor) break;
  }
  return items;
}
