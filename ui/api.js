// Talking to the server: every call carries the API key kept for this tab
// (sessionStorage, never in a URL), a 401 sends the page back to the key
// prompt, error bodies become ApiError with the server's message, and
// server-sent events are read from a fetch() body (EventSource cannot send an
// Authorization header, and an aborted fetch is how a stream is stopped).

const KEY_ITEM = 'spool.apiKey';

export class ApiError extends Error {
  constructor(status, error) {
    super(error?.message ?? `HTTP ${status}`);
    this.status = status;
    this.code = error?.code ?? null;
    this.param = error?.param ?? null;
  }
}

export class AuthError extends ApiError {}

let authFailed = () => {};

export const apiKey = () => sessionStorage.getItem(KEY_ITEM) ?? '';
export const setApiKey = (key) => (key ? sessionStorage.setItem(KEY_ITEM, key) : sessionStorage.removeItem(KEY_ITEM));
export const onAuthFailure = (fn) => { authFailed = fn; };

// fetch() with the key; returns the Response when ok (throws ApiError otherwise).
export async function request(path, { method = 'GET', body, headers = {}, signal } = {}) {
  const h = { ...headers };
  const key = apiKey();
  if (key) h.Authorization = `Bearer ${key}`;
  if (body !== undefined && typeof body !== 'string') {
    body = JSON.stringify(body);
    h['Content-Type'] = 'application/json';
  }
  const res = await fetch(path, { method, body, headers: h, signal, cache: 'no-store' });
  if (res.ok) return res;
  let error = null;
  try {
    error = (await res.json()).error;
  } catch {
    // not a JSON error body
  }
  if (res.status === 401) {
    authFailed(error?.message ?? 'unauthorized');
    throw new AuthError(401, error);
  }
  throw new ApiError(res.status, error);
}

export async function getJson(path, options) {
  return (await request(path, options)).json();
}

export function postJson(path, body, options = {}) {
  return getJson(path, { ...options, method: 'POST', body });
}

// Yields {event, id, data} for each server-sent event of a Response body.
export async function* readEvents(res) {
  const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
  let buf = '';
  let ev = { event: 'message', id: null, data: [] };
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    buf += value;
    let nl;
    while ((nl = buf.indexOf('\n')) >= 0) {
      const line = buf.slice(0, nl).replace(/\r$/, '');
      buf = buf.slice(nl + 1);
      if (line === '') {
        if (ev.data.length) yield { event: ev.event, id: ev.id, data: ev.data.join('\n') };
        ev = { event: 'message', id: null, data: [] };
      } else if (!line.startsWith(':')) {
        const colon = line.indexOf(':');
        const field = colon < 0 ? line : line.slice(0, colon);
        const val = colon < 0 ? '' : line.slice(colon + 1).replace(/^ /, '');
        if (field === 'data') ev.data.push(val);
        else if (field === 'event') ev.event = val;
        else if (field === 'id') ev.id = val;
      }
    }
  }
}
