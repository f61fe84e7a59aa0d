// Shared by the API tests: a real `spool serve` (spool_process.mjs) with an
// official `openai` client on it, /metrics samples, error-shape checks.
import OpenAI from 'openai';
import {
  startServer as startProcess, stopProcess, runSpool, qwen2TinyWithTemplate, SPOOL_BIN, SHARED, STORIES,
} from './spool_process.mjs';

export { stopProcess, runSpool, qwen2TinyWithTemplate, SPOOL_BIN, SHARED, STORIES };

// Starts `spool serve -m model --port 0 ...args` (see spool_process.mjs); the
// result also has client(opts): an OpenAI client on the server.
export async function startServer(model, args = [], options = {}) {
  const s = await startProcess(model, args, options);
  s.client = (opts = {}) => new OpenAI({ baseURL: `${s.url}/v1`, apiKey: 'none', maxRetries: 0, timeout: 60000, ...opts });
  return s;
}

// One sample's value from Prometheus text (name with labels, exactly as printed).
export async function metric(url, name, headers = {}) {
  const res = await fetch(`${url}/metrics`, { headers });
  const text = await res.text();
  for (const line of text.split('\n')) {
    if (line.startsWith(name + ' ')) return Number(line.slice(name.length + 1));
  }
  throw new Error(`metric ${name} not found in:\n${text}`);
}

export async function waitFor(predicate, { timeoutMs = 10000, stepMs = 50 } = {}) {
  const end = Date.now() + timeoutMs;
  for (;;) {
    if (await predicate()) return true;
    if (Date.now() > end) return false;
    await new Promise((r) => setTimeout(r, stepMs));
  }
}

export async function postRaw(url, route, body, headers = {}) {
  const res = await fetch(url + route, {
    method: 'POST',
    headers: { 'Content-Type': 'application/json', ...headers },
    body,
  });
  return { status: res.status, headers: res.headers, json: await res.json() };
}

export function assertErrorShape(assert, body, code) {
  assert.equal(typeof body.error, 'object', JSON.stringify(body));
  assert.equal(typeof body.error.message, 'string');
  assert.ok(body.error.message.length > 0);
  assert.equal(typeof body.error.type, 'string');
  assert.ok('param' in body.error);
  assert.ok('code' in body.error);
  if (code !== undefined) assert.equal(body.error.code, code, JSON.stringify(body));
}
