// What a web page the user opens, or a hostile document, can do to a
// `spool serve` on loopback without a key (issue 25, docs/RELIABILITY.md
// "Threat model"): YAML alias bombs, DNS rebinding (Host), cross-site posts
// (Content-Type, Origin), bodies past --max-body in every framing, and the
// server alive after each. Raw requests where a browser or attacker would send
// what no client library does; the official openai client elsewhere.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import zlib from 'node:zlib';
import { toFile } from 'openai';
import { startServer, STORIES, assertErrorShape } from './helpers.mjs';
import { rawRequest, httpText } from './raw_http.mjs';

const MAX_BODY = 65536;
let server;
before(async () => {
  server = await startServer(STORIES, ['-c', '256', '--max-body', String(MAX_BODY),
    '--allowed-host', 'my.box', '--cors-origin', 'http://app.example:3000']);
});
after(async () => server && (await server.stop()));

// A raw request with the given headers (Host defaults to localhost); the body as a string or Buffer.
async function send(method, path, { headers = {}, body = null, host = 'localhost' } = {}) {
  const lines = [`${method} ${path} HTTP/1.1`, `Host: ${host}`, 'Connection: close'];
  for (const [k, v] of Object.entries(headers)) lines.push(`${k}: ${v}`);
  const b = body === null ? null : Buffer.isBuffer(body) ? body : Buffer.from(body, 'utf8');
  if (b && !('Transfer-Encoding' in headers)) lines.push(`Content-Length: ${b.length}`);
  const head = Buffer.from(lines.join('\r\n') + '\r\n\r\n', 'latin1');
  return rawRequest(server.url, b ? Buffer.concat([head, b]) : head);
}

async function assertAlive() {
  const h = await fetch(`${server.url}/health`);
  assert.equal(h.status, 200);
}

function assertApiError(r, status, code) {
  assert.equal(r.status, status, `${r.status} ${r.error ?? ''} ${r.body.slice(0, 500)}`);
  assertErrorShape(assert, r.json, code);
}

test('YAML only for its exact media types; text/plain;x=yaml is 415', async () => {
  const spec = 'agents:\n  - name: a\n    prompt: "{input}"\n';
  assertApiError(await send('POST', '/v1/pipelines', { headers: { 'Content-Type': 'text/plain; x=yaml' }, body: spec }),
                 415, 'unsupported_media_type');
  assertApiError(await send('PUT', '/v1/pipeline-specs/x', { headers: { 'Content-Type': 'text/plain;yaml' }, body: spec }),
                 415, 'unsupported_media_type');
  for (const type of ['application/yaml', 'application/x-yaml', 'text/yaml; charset=utf-8']) {
    const r = await send('PUT', '/v1/pipeline-specs/yaml-ok', { headers: { 'Content-Type': type }, body: spec });
    assert.equal(r.status, 200, `${type}: ${r.body}`);
  }
});

test('a YAML alias cycle or "billion laughs" is a 400 naming it; the server stays up', async () => {
  const cyc = await send('POST', '/v1/pipelines', { headers: { 'Content-Type': 'application/yaml' }, body: 'a: &a [*a]\n' });
  assertApiError(cyc, 400, 'invalid_yaml');
  assert.match(cyc.json.error.message, /cycle/);
  let doc = 'a0: &a0 [lol, lol, lol, lol, lol, lol, lol, lol, lol, lol]\n';
  for (let i = 1; i <= 8; ++i) doc += `a${i}: &a${i} [${Array.from({ length: 10 }, () => `*a${i - 1}`).join(', ')}]\n`;
  const t0 = Date.now();
  const laughs = await send('PUT', '/v1/pipeline-specs/lol', { headers: { 'Content-Type': 'application/yaml' }, body: doc });
  assertApiError(laughs, 400, 'invalid_yaml');
  assert.match(laughs.json.error.message, /expands to more than/);
  assert.ok(Date.now() - t0 < 5000, `took ${Date.now() - t0} ms`);
  await assertAlive();
});

test('DNS rebinding: a Host that is not a loopback name or --allowed-host gets 403 on every route', async () => {
  for (const path of ['/v1/stats', '/v1/models', '/v1/pipelines', '/metrics', '/', '/health']) {
    const r = await send('GET', path, { host: 'evil.example' });
    assertApiError(r, 403, 'host_not_allowed');
    assert.match(r.json.error.message, /--allowed-host/);
  }
  assertApiError(await send('GET', '/v1/models', { host: 'localhost.evil.example:8080' }), 403, 'host_not_allowed');
  for (const host of ['localhost', 'localhost:1', '127.0.0.1:9', '127.3.4.5', '[::1]:8080', 'my.box', 'MY.BOX:443']) {
    const r = await send('GET', '/v1/models', { host });
    assert.equal(r.status, 200, `${host}: ${r.body}`);
  }
});

test('cross-site requests: only the own origin and --cors-origin ones, with CORS headers and preflight', async () => {
  const port = new URL(server.url).port;
  const chat = JSON.stringify({ prompt: 'Once upon a time', max_tokens: 2, temperature: 0 });
  const json = { 'Content-Type': 'application/json' };
  const evil = await send('POST', '/v1/completions', { headers: { ...json, Origin: 'http://evil.example' }, body: chat });
  assertApiError(evil, 403, 'origin_not_allowed');
  assert.match(evil.json.error.message, /--cors-origin/);
  assertApiError(await send('GET', '/v1/pipelines', { headers: { Origin: 'null' } }), 403, 'origin_not_allowed');
  // The server's own page (the web UI) and a listed origin are answered.
  const own = await send('POST', '/v1/completions', { headers: { ...json, Origin: `http://localhost:${port}` },
                                                    host: `localhost:${port}`, body: chat });
  assert.equal(own.status, 200, own.body);
  assert.equal(own.headers['access-control-allow-origin'], undefined);
  const app = await send('POST', '/v1/completions', { headers: { ...json, Origin: 'http://app.example:3000' }, body: chat });
  assert.equal(app.status, 200, app.body);
  assert.equal(app.headers['access-control-allow-origin'], 'http://app.example:3000');
  const pre = await send('OPTIONS', '/v1/chat/completions', {
    headers: { Origin: 'http://app.example:3000', 'Access-Control-Request-Method': 'POST',
               'Access-Control-Request-Headers': 'content-type,authorization' } });
  assert.equal(pre.status, 204, pre.raw);
  assert.equal(pre.headers['access-control-allow-origin'], 'http://app.example:3000');
  assert.match(pre.headers['access-control-allow-headers'], /Content-Type/i);
  const badPre = await send('OPTIONS', '/v1/chat/completions', { headers: { Origin: 'http://evil.example' } });
  assert.equal(badPre.status, 403);
});

test('bodies a browser can send cross-site without a preflight are refused: 415, never parsed', async () => {
  const chat = JSON.stringify({ messages: [{ role: 'user', content: 'hi' }], max_tokens: 1 });
  for (const type of ['text/plain', 'application/x-www-form-urlencoded', 'multipart/form-data; boundary=x', '']) {
    const headers = type ? { 'Content-Type': type } : {};
    assertApiError(await send('POST', '/v1/chat/completions', { headers, body: chat }), 415, 'unsupported_media_type');
  }
  // A form-encoded body over 8 KB: 415 (it used to be a 413 naming an 8 MiB limit).
  assertApiError(await send('POST', '/v1/completions', { headers: { 'Content-Type': 'application/x-www-form-urlencoded' },
                                                        body: 'a='.padEnd(9000, 'x') }), 415, 'unsupported_media_type');
  assertApiError(await send('POST', '/v1/batches', { headers: { 'Content-Type': 'text/plain' }, body: '{}' }), 415,
                 'unsupported_media_type');
  // Uploads stay multipart, through the official client.
  const f = await server.client().files.create({ file: await toFile(Buffer.from('{}\n'), 'a.jsonl'), purpose: 'batch' });
  assert.match(f.id, /^file-/);
});

test('--max-body holds for chunked and gzip bodies too, and errors never echo the body', async () => {
  const json = { 'Content-Type': 'application/json' };
  // Chunked: 1 MiB in 64 KiB chunks, never buffered past the limit.
  const piece = Buffer.alloc(65536, 'a');
  const chunks = [Buffer.from(`{"content": "`)];
  for (let i = 0; i < 16; ++i) chunks.push(piece);
  chunks.push(Buffer.from('"}'));
  let framed = Buffer.alloc(0);
  for (const c of chunks) framed = Buffer.concat([framed, Buffer.from(c.length.toString(16) + '\r\n'), c, Buffer.from('\r\n')]);
  framed = Buffer.concat([framed, Buffer.from('0\r\n\r\n')]);
  const chunked = await send('POST', '/tokenize', { headers: { ...json, 'Transfer-Encoding': 'chunked' }, body: framed });
  assertApiError(chunked, 413, 'payload_too_large');
  // gzip: 40 KB on the wire, 40 MB decoded.
  const bomb = zlib.gzipSync(Buffer.concat([Buffer.from('{"content": "'), Buffer.alloc(40 << 20, 'a'), Buffer.from('"}')]));
  assert.ok(bomb.length < MAX_BODY);
  const gz = await send('POST', '/tokenize', { headers: { ...json, 'Content-Encoding': 'gzip' }, body: bomb });
  assertApiError(gz, 413, 'payload_too_large');
  // A small gzip body is read as it decodes.
  const small = await send('POST', '/tokenize', { headers: { ...json, 'Content-Encoding': 'gzip' },
                                                 body: zlib.gzipSync('{"content": "Once upon a time"}') });
  assert.equal(small.status, 200, small.body);
  assert.ok(small.json.tokens.length > 2);
  const corrupt = await send('POST', '/tokenize', { headers: { ...json, 'Content-Encoding': 'gzip' }, body: Buffer.from('not gzip at all') });
  assert.equal(corrupt.status, 400, corrupt.raw);
  // An error about a value never echoes it back whole.
  const big = JSON.stringify({ tokens: ['x'.repeat(60000)] });
  const echo = await send('POST', '/detokenize', { headers: json, body: big });
  assertApiError(echo, 400);
  assert.ok(echo.body.length < 5000, `error body of ${echo.body.length} bytes`);
  const badJson = await send('POST', '/tokenize', { headers: json, body: '{"content": "' + 'y'.repeat(60000) });
  assertApiError(badJson, 400, 'invalid_json');
  assert.ok(badJson.body.length < 5000, `error body of ${badJson.body.length} bytes`);
  await assertAlive();
});

test('a POST with no body at all is an empty body, not a malformed request', async () => {
  const r = await send('POST', '/v1/pipelines/run_nope/cancel');
  assertApiError(r, 404, 'not_found');
  assert.match(r.json.error.message, /no pipeline run/);
});

test('a prompt far longer than the context is refused before it is tokenized', async () => {
  const s = await startServer(STORIES, ['-c', '128']);  // default --max-body: 8 MiB
  try {
    const t0 = Date.now();
    const r = await fetch(`${s.url}/v1/completions`, {
      method: 'POST', headers: { 'Content-Type': 'application/json' },
      body: JSON.stringify({ prompt: 'Once upon a time '.repeat(400000), max_tokens: 1 }),  // 6.8 MB
    });
    const j = await r.json();
    assert.equal(r.status, 400);
    assertErrorShape(assert, j, 'context_length_exceeded');
    assert.match(j.error.message, /bytes of text/);
    assert.ok(Date.now() - t0 < 3000, `took ${Date.now() - t0} ms`);
  } finally {
    await s.stop();
  }
});

test('/v1/models names the model without the path of its file; an unknown response id is a 404 naming it', async () => {
  const models = await server.client().models.list();
  const text = JSON.stringify(models.data);
  assert.ok(!text.includes('/'), text);
  const r = await fetch(`${server.url}/v1/responses/resp_unknown123`);
  assert.equal(r.status, 404);
  const j = await r.json();
  assertErrorShape(assert, j, 'not_found');
  assert.match(j.error.message, /resp_unknown123/);
});

// Past a second too (no more keep-alive spaces committing to a 200): server_test's RequestTimeoutIs504EvenAfterASecond.
test('--request-timeout is an error status the official client raises', async () => {
  const s = await startServer(STORIES, ['-c', '2048', '--request-timeout', '0.05']);
  try {
    await assert.rejects(
      s.client().completions.create({ prompt: 'Once upon a time', max_tokens: 2000, ignore_eos: true, temperature: 0 }),
      (e) => e.status === 504 && e.code === 'request_timeout');
  } finally {
    await s.stop();
  }
});
