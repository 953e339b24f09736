// The console's calls: every one goes to /console/v1/…, which the daemon passes to its
// public API /v1/… with the signed-in viewer's token. State-changing calls carry the
// session's CSRF token in a header; the session itself is an HttpOnly cookie the page
// never sees.

export const session = { csrf: '', whoami: null };

export class APIError extends Error {
  constructor(status, code, message, details) {
    super(message);
    this.status = status; this.code = code; this.details = details;
  }
}

async function failure(resp) {
  let code = 'http_' + resp.status, message = resp.statusText || 'request failed', details;
  try {
    const b = await resp.json();
    if (b && b.error) { code = b.error.code; message = b.error.message; details = b.error.details; }
  } catch (_) { /* not the API's error shape */ }
  return new APIError(resp.status, code, message, details);
}

function headers(method, json) {
  const h = {};
  if (method !== 'GET' && method !== 'HEAD') h['X-Airlock-CSRF'] = session.csrf;
  if (json) h['Content-Type'] = 'application/json';
  return h;
}

// call sends one API call and returns its JSON answer (null for an empty one).
export async function call(method, path, body, opts = {}) {
  const json = body !== undefined && !(body instanceof Blob);
  const resp = await fetch('/console' + path, {
    method, credentials: 'same-origin', headers: Object.assign(headers(method, json), opts.headers || {}),
    body: body === undefined ? undefined : (json ? JSON.stringify(body) : body), signal: opts.signal,
  });
  if (resp.status === 401 && !opts.noSignIn) { location.hash = '#/signin'; }
  if (!resp.ok) throw await failure(resp);
  const text = await resp.text();
  return text ? JSON.parse(text) : null;
}

export const get = (path, opts) => call('GET', path, undefined, opts);

// lines reads an NDJSON answer and calls each with every object, until it ends or
// signal aborts.
export async function lines(path, each, signal) {
  const resp = await fetch('/console' + path, { credentials: 'same-origin', signal });
  if (!resp.ok) throw await failure(resp);
  const reader = resp.body.getReader();
  const dec = new TextDecoder();
  let buf = '';
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buf += dec.decode(value, { stream: true });
    let i;
    while ((i = buf.indexOf('\n')) >= 0) {
      const line = buf.slice(0, i); buf = buf.slice(i + 1);
      if (line.trim()) each(JSON.parse(line));
    }
  }
  if (buf.trim()) each(JSON.parse(buf));
}

export async function signIn(token) {
  const resp = await fetch('/console/session', {
    method: 'POST', credentials: 'same-origin', headers: { 'Content-Type': 'application/json' },
    body: JSON.stringify({ token }),
  });
  if (!resp.ok) throw await failure(resp);
  const b = await resp.json();
  session.csrf = b.csrf; session.whoami = b.whoami;
}

export async function resumeSession() {
  const resp = await fetch('/console/session', { credentials: 'same-origin' });
  if (!resp.ok) return false;
  const b = await resp.json();
  session.csrf = b.csrf; session.whoami = b.whoami;
  return true;
}

export async function signOut() {
  await fetch('/console/session', { method: 'DELETE', credentials: 'same-origin', headers: headers('DELETE') });
  session.csrf = ''; session.whoami = null;
}

export function can(perm) {
  const p = (session.whoami && session.whoami.permissions) || [];
  return p.includes('admin') || p.includes(perm);
}

export const isAdmin = () => can('admin');

export const enc = encodeURIComponent;
