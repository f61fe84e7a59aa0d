// Hostile and careless clients against a real `spool serve` (issue 16): each
// gets a bounded answer (an OpenAI error, a timeout, a closed connection) and
// the server stays healthy: after every case /health is ok and /metrics shows
// no KV block held and no request running or waiting.
import { test, before, after, afterEach } from 'node:test';
import assert from 'node:assert/strict';
import { startServer, STORIES, assertErrorShape } from './helpers.mjs';
import { rawRequest, httpText, holdOpen, assertQuiet, metrics } from './raw_http.mjs';

const N_CTX = 128;
const MAX_BODY = 65536;
let server;
before(async () => {
  server = await startServer(STORIES, [
    '-c', String(N_CTX), '--max-header-bytes', '16384', '--max-headers', '20', '--max-body', String(MAX_BODY),
    '--header-timeout', '2', '--body-timeout', '2', '--read-timeout', '2',
  ]);
});
after(async () => server && (await server.stop()));
afterEach(async () => server && (await assertQuiet(server.url)));

const completion = (body, headers = {}) =>
  httpText('POST', '/v1/completions', { headers: { 'Content-Type': 'application/json', ...headers }, body });

function assertApiError(r, status, code) {
  assert.equal(r.status, status, `${r.status} ${r.error ?? ''} ${r.body}`);
  assertErrorShape(assert, r.json, code);
}

test('headers over --max-header-bytes or --max-headers get 431; under them the request is served', async () => {
  const big = {};
  for (let i = 0; i < 10; ++i) big[`X-Pad-${i}`] = 'a'.repeat(2000);  // 20 KB > 16 KiB, 10 lines
  assertApiError(await rawRequest(server.url, httpText('GET', '/health', { headers: big })), 431, 'header_too_large');
  const many = {};
  for (let i = 0; i < 30; ++i) many[`X-N-${i}`] = '1';
  assertApiError(await rawRequest(server.url, httpText('GET', '/health', { headers: many })), 431, 'header_too_large');
  const fine = {};
  for (let i = 0; i < 15; ++i) fine[`X-Ok-${i}`] = 'b'.repeat(500);
  const r = await rawRequest(server.url, httpText('GET', '/health', { headers: fine }));
  assert.equal(r.status, 200, r.raw);
});

test('an endless header is cut off with 431, not read into memory', async () => {
  const head = 'GET /health HTTP/1.1\r\nHost: localhost\r\n';
  const chunks = [head, ...Array.from({ length: 400 }, (_, i) => `X-Flood-${i}: ${'z'.repeat(1000)}\r\n`)];
  const t0 = Date.now();
  const r = await rawRequest(server.url, null, { chunks });
  assertApiError(r, 431, 'header_too_large');
  assert.ok(Date.now() - t0 < 5000);
});

test('a header trickled slower than --header-timeout gets 408 at the deadline', async () => {
  // One byte every 200 ms: each read is well inside --read-timeout, the whole is not.
  const t0 = Date.now();
  const p = holdOpen(server.url, 'GET /health HTTP/1.1\r\n');
  const h = await p;
  const timer = setInterval(() => h.sock.writable && h.sock.write('X'), 200);
  const closedAt = await h.closed;
  clearInterval(timer);
  const r = (await import('./raw_http.mjs')).parseResponse(Buffer.from(h.data(), 'latin1'));
  assertApiError(r, 408, 'request_header_timeout');
  const ms = closedAt - t0;
  assert.ok(ms >= 1800 && ms < 4500, `closed after ${ms} ms`);
});

test('a body trickled slower than --body-timeout gets 408 at the deadline', async () => {
  const t0 = Date.now();
  const h = await holdOpen(server.url,
    'POST /v1/completions HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{');
  const timer = setInterval(() => h.sock.writable && h.sock.write(' '), 200);
  const closedAt = await h.closed;
  clearInterval(timer);
  const r = (await import('./raw_http.mjs')).parseResponse(Buffer.from(h.data(), 'latin1'));
  assertApiError(r, 408, 'request_body_timeout');
  const ms = closedAt - t0;
  assert.ok(ms >= 1800 && ms < 4500, `closed after ${ms} ms`);
});

test('a URI longer than 8192 bytes gets 414', async () => {
  const r = await rawRequest(server.url, httpText('GET', '/health?x=' + 'u'.repeat(9000)));
  assertApiError(r, 414, 'uri_too_long');
});

test('a body exactly at --max-body is served; one byte more gets 413', async () => {
  const json = JSON.stringify({ prompt: 'Once upon a time', max_tokens: 2, temperature: 0 });
  const at = json + ' '.repeat(MAX_BODY - json.length);
  const ok = await rawRequest(server.url, completion(at));
  assert.equal(ok.status, 200, ok.raw.slice(0, 500));
  assert.equal(ok.json.usage.completion_tokens, 2);
  const over = await rawRequest(server.url, completion(at + ' '));
  assertApiError(over, 413, 'payload_too_large');
});

test('JSON nested deeper than 128 levels gets 400 naming the depth', async () => {
  const nested = (depth) => '{"prompt":"Once","max_tokens":1,"user":' + '['.repeat(depth - 1) + ']'.repeat(depth - 1) + '}';
  const deep = await rawRequest(server.url, completion(nested(129)));
  assertApiError(deep, 400, 'json_too_deep');
  assert.match(deep.json.error.message, /deeper than 128/);
  const deeper = await rawRequest(server.url, completion('['.repeat(60000)));
  assertApiError(deeper, 400, 'json_too_deep');
  const ok = await rawRequest(server.url, completion(nested(128)));
  assert.notEqual(ok.json?.error?.code, 'json_too_deep', ok.body);
  // Brackets inside strings do not count.
  const inString = await rawRequest(server.url, httpText('POST', '/tokenize', {
    headers: { 'Content-Type': 'application/json' }, body: JSON.stringify({ content: '[{\\"'.repeat(300) }) }));
  assert.equal(inString.status, 200, inString.body);
});

test('invalid UTF-8 or a lone surrogate in a prompt gets 400 invalid_json', async () => {
  const bad = Buffer.concat([Buffer.from('{"prompt":"Once'), Buffer.from([0xff, 0xfe]), Buffer.from(' upon","max_tokens":1}')]);
  assertApiError(await rawRequest(server.url, completion(bad)), 400, 'invalid_json');
  const overlong = Buffer.concat([Buffer.from('{"prompt":"'), Buffer.from([0xc0, 0xaf]), Buffer.from('","max_tokens":1}')]);
  assertApiError(await rawRequest(server.url, completion(overlong)), 400, 'invalid_json');
  assertApiError(await rawRequest(server.url, completion('{"prompt":"a\\ud800b","max_tokens":1}')), 400, 'invalid_json');
});

test('prompts of 0, 1, n_ctx-1, n_ctx and n_ctx+1 tokens get bounded answers', async () => {
  const ask = (n, max_tokens = 4) =>
    rawRequest(server.url, completion(JSON.stringify({ prompt: Array(n).fill(300), max_tokens, temperature: 0 })));
  assert.equal((await ask(0)).status, 400);
  const one = await ask(1);
  assert.equal(one.status, 200, one.body);
  assert.equal(one.json.usage.prompt_tokens, 1);
  const last = await ask(N_CTX - 1);
  assert.equal(last.status, 200, last.body);
  assert.ok(last.json.usage.completion_tokens <= 1, last.body);  // room for one token
  for (const n of [N_CTX, N_CTX + 1, 50 * N_CTX]) {
    const r = await ask(n);
    assert.equal(r.status, 400, `${n}: ${r.body}`);
    assertErrorShape(assert, r.json);
    assert.match(r.json.error.message, /context/);
  }
});

test('max_tokens 0 and 2^31 get 400; 2^31-1 is clamped to the context', async () => {
  const ask = (max_tokens) =>
    rawRequest(server.url, completion(JSON.stringify({ prompt: 'Once upon a time', max_tokens, temperature: 0 })));
  for (const bad of [0, 2 ** 31, -1]) {
    const r = await ask(bad);
    assert.equal(r.status, 400, `${bad}: ${r.body}`);
    assertErrorShape(assert, r.json);
  }
  const r = await ask(2 ** 31 - 1);
  assert.equal(r.status, 200, r.body);
  assert.ok(r.json.usage.prompt_tokens + r.json.usage.completion_tokens <= N_CTX, r.body);
});

test('a client that sends half a body and vanishes frees its worker', async () => {
  const h = await holdOpen(server.url,
    'POST /v1/completions HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{"prompt":');
  h.sock.destroy();
  const r = await rawRequest(server.url, httpText('GET', '/health'));
  assert.equal(r.status, 200);
});

test('connections past --max-connections get 503 with Retry-After; the server stays healthy', async () => {
  // The held connections must outlast the test however slow the machine: long read and header timeouts.
  const small = await startServer(STORIES, ['-c', String(N_CTX), '--max-connections', '4', '--read-timeout', '30',
                                            '--header-timeout', '60']);
  try {
    const held = await Promise.all(Array.from({ length: 4 }, () => holdOpen(small.url, 'GET /health HTTP/1.1\r\n')));
    await new Promise((r) => setTimeout(r, 200));
    const t0 = Date.now();
    const refused = await Promise.all(Array.from({ length: 20 }, () => rawRequest(small.url, httpText('GET', '/health'))));
    assert.ok(Date.now() - t0 < 2000, `refusals took ${Date.now() - t0} ms`);
    for (const r of refused) {
      assertApiError(r, 503, 'too_many_connections');
      assert.equal(r.headers['retry-after'], '1');
    }
    for (const h of held) h.sock.destroy();
    await new Promise((r) => setTimeout(r, 300));
    const c = small.client();
    const ok = await c.completions.create({ model: small.modelId, prompt: 'Once upon a time', max_tokens: 4, temperature: 0 });
    assert.equal(ok.usage.completion_tokens, 4);
    const m = await assertQuiet(small.url);
    assert.ok(m['spool_http_responses_total{code="503"}'] >= 20);
  } finally {
    await small.stop();
  }
});
