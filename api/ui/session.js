// Who the dashboard speaks for: the token's name and scope from /v1/session, so that it offers
// only what that token may do (the API checks again on every call).

import { get } from "./api.js";
import { setServerNow } from "./format.js";

export const session = { actor: null, scope: "read" };
const SCOPES = ["read", "write", "admin"];

export async function loadSession() {
  const data = await get("/v1/session");
  session.actor = data.actor;
  session.scope = data.scope;
  setServerNow(data.now);
  return session;
}

/** Whether this token may change `job` (system jobs need admin). */
export function canChange(job) {
  const needed = job && job.system ? "admin" : "write";
  return SCOPES.indexOf(session.scope) >= SCOPES.indexOf(needed);
}

export function canWrite() {
  return canChange(null);
}
