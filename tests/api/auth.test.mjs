// API keys on a real `spool serve`: with --api-key (and --api-key-file) every
// route but /health needs `Authorization: Bearer KEY`; a wrong or missing key
// is a 401 with an OpenAI error; a non-loopback address without a key is
// refused at start.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, writeFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import OpenAI from 'openai';
import { startServer, runSpool, assertErrorShape, STORIES } from './helpers.mjs';
import { rawRequest } from './raw_http.mjs';

const KEY = 'test-key-3f9a1c';
let server;
before(async () => {
  server = await startServer(STORIES, ['--api-key', KEY]);
});
after(async () => server && (await server.stop()));

test('the right key is accepted', async () => {
  const client = server.client({ apiKey: KEY });
  const r = await client.completions.create({ prompt: 'Once upon a time', max_tokens: 4 });
  assert.equal(r.usage.completion_tokens, 4);
  assert.equal((await client.models.list()).data.length, 1);
  const m = await fetch(`${server.url}/metrics`, { headers: { Authorization: `Bearer ${KEY}` } });
  assert.equal(m.status, 200);
});

test('a wrong or missing key is refused with 401', async () => {
  for (const apiKey of ['wrong', KEY.slice(0, -1), KEY + 'x']) {
    await assert.rejects(server.client({ apiKey }).completions.create({ prompt: 'a', max_tokens: 1 }),
      (e) => e instanceof OpenAI.AuthenticationError && e.status === 401 && e.code === 'invalid_api_key');
  }
  for (const route of ['/v1/models', '/metrics']) {
    const r = await fetch(server.url + route);
    assert.equal(r.status, 401, route);
    assertErrorShape(assert, await r.json(), 'invalid_api_key');
  }
  const t = await fetch(`${server.url}/tokenize`, { method: 'POST', body: '{"content": "a"}', headers: { Authorization: 'Bearer nope' } });
  assert.equal(t.status, 401);
});

test('/health needs no key', async () => {
  const r = await fetch(`${server.url}/health`);
  assert.equal(r.status, 200);
  assert.deepEqual(await r.json(), { status: 'ok' });
});

test('--api-key-file works the same', async () => {
  const dir = mkdtempSync(path.join(tmpdir(), 'spool-key-'));
  const file = path.join(dir, 'key');
  writeFileSync(file, `${KEY}\n`);
  const s = await startServer(STORIES, ['--api-key-file', file]);
  try {
    const ok = await s.client({ apiKey: KEY }).completions.create({ prompt: 'a', max_tokens: 1 });
    assert.equal(ok.usage.completion_tokens, 1);
    await assert.rejects(s.client({ apiKey: 'nope' }).models.list(), (e) => e.status === 401);
  } finally {
    await s.stop();
    rmSync(dir, { recursive: true, force: true });
  }
});

test('a non-loopback address without a key is refused at start', async () => {
  const r = await runSpool(['serve', '-m', STORIES, '--host', '0.0.0.0', '--port', '0']);
  assert.equal(r.code, 1);
  assert.match(r.stderr, /without an API key/);
});

test('a 401 to a request with a body closes the connection instead of parsing the body as the next request', async () => {
  const body = JSON.stringify({ prompt: 'hi', max_tokens: 1 });
  const head = `POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: ${body.length}\r\n\r\n`;
  const r = await rawRequest(server.url, null, { chunks: [head, body, 'GET /health HTTP/1.1\r\nHost: x\r\n\r\n'], timeoutMs: 5000 });
  assert.equal(r.status, 401, r.raw);
  assert.equal(r.headers.connection, 'close', r.raw);
  assert.equal(r.raw.match(/HTTP\/1\.1 \d{3}/g).length, 1, r.raw);  // nothing answered the body's bytes
  assert.equal(r.error, null, String(r.error));                     // closed by the server, not by the timeout
  // Without a body the connection stays open for the next request.
  const k = await rawRequest(server.url, null, { chunks: ['GET /v1/models HTTP/1.1\r\nHost: x\r\nConnection: keep-alive\r\n\r\n'], timeoutMs: 1500 });
  assert.equal(k.status, 401, k.raw);
  assert.notEqual(k.headers.connection, 'close', k.raw);
});
