// Storage faults over HTTP through `spool serve` (issue 16): a streamed MoE
// model (deepseek3-fp8-tiny under a --mem-budget that leaves its experts on
// the server) read with Range requests from a real HTTP server on loopback
// (node:http, below) that misbehaves on the byte range of one expert slice:
// - transient 503s and a connection dropped mid-body are retried: the request
//   completes with the text of a server without faults, and /metrics counts
//   the retries;
// - a range that keeps failing fails, after --http-retries, only the requests
//   that need it, with an OpenAI error naming the tensor, its bytes, the URL
//   and the HTTP status; their KV blocks are freed, a request whose experts
//   are cached completes meanwhile, and once the server heals the same request
//   completes with the fault-free text;
// - a response that stalls holds only the request that needs it
//   (--read-stall-ms): others are answered during the stall.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import http from 'node:http';
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { startServer, assertErrorShape } from './helpers.mjs';
import { assertQuiet, metrics } from './raw_http.mjs';
import { MODEL, ARGS, faultyExpert, complete, promptAvoiding } from './fault_fixture.mjs';

// The range server. `fault` applies to GETs whose range overlaps
// [fault.begin, fault.end): { kind: 'status', status, count } answers that
// status; { kind: 'drop', count } sends the headers and half the body, then
// closes the connection; { kind: 'stall', ms, count } waits before answering.
// count: how many overlapping requests are faulted (Infinity: all).
const bytes = readFileSync(MODEL);
let fault = null;
let served = { ranges: 0, faulted: 0 };
let server, url;

function answer(req, res) {
  const m = /^bytes=(\d+)-(\d+)$/.exec(req.headers.range ?? '');
  if (!m) {
    res.writeHead(200, { 'Content-Length': bytes.length });
    return res.end(bytes);
  }
  const a = Number(m[1]), b = Math.min(Number(m[2]), bytes.length - 1);
  if (a >= bytes.length || b < a) {
    res.writeHead(416, { 'Content-Range': `bytes */${bytes.length}` });
    return res.end();
  }
  ++served.ranges;
  const body = bytes.subarray(a, b + 1);
  const headers = { 'Content-Range': `bytes ${a}-${b}/${bytes.length}`, 'Content-Length': body.length };
  const f = fault;
  if (f && a < f.end && b >= f.begin && f.count > 0) {
    --f.count;
    ++served.faulted;
    if (f.kind === 'status') {
      res.writeHead(f.status, { 'Content-Type': 'text/plain' });
      return res.end('injected fault\n');
    }
    if (f.kind === 'drop') {
      res.writeHead(206, headers);
      res.write(body.subarray(0, body.length >> 1));
      return setTimeout(() => res.socket.destroy(), 20);
    }
    if (f.kind === 'stall') return setTimeout(() => (res.writeHead(206, headers), res.end(body)), f.ms);
  }
  res.writeHead(206, headers);
  res.end(body);
}

let mid, reference, modelUrl;
before(async () => {
  server = http.createServer(answer);
  server.keepAliveTimeout = 30000;
  await new Promise((r) => server.listen(0, '127.0.0.1', r));
  url = `http://127.0.0.1:${server.address().port}`;
  modelUrl = `${url}/${path.basename(MODEL)}`;
  ({ mid } = faultyExpert());
  // The reference comes from the local file: over HTTP without faults the text must be the same.
  const s = await startServer(MODEL, ARGS);
  try {
    reference = await complete(s);
    assert.equal(reference.status, 200, reference.text);
  } finally {
    await s.stop();
  }
});

after(() => new Promise((r) => { server.closeAllConnections(); server.close(r); }));

function faultAt(f) {
  fault = { begin: mid, end: mid + 1, count: Infinity, ...f };
  served = { ranges: 0, faulted: 0 };
}

test('without faults a model over HTTP streams the text of the local file', async () => {
  fault = null;
  const s = await startServer(modelUrl, ARGS);
  try {
    const m = await metrics(s.url);
    assert.ok(m.spool_weight_bytes_read_total !== undefined, 'the model does not stream under ' + ARGS.join(' '));
    const r = await complete(s);
    assert.equal(r.status, 200, r.text);
    assert.equal(r.json.choices[0].text, reference.json.choices[0].text);
    assert.ok(served.ranges > 0, 'no range request reached the server');
    assert.equal((await metrics(s.url)).spool_weight_read_retries_total, 0);
  } finally {
    await s.stop();
  }
});

for (const [name, f] of [['two 503 answers', { kind: 'status', status: 503, count: 2 }],
                         ['a connection dropped mid-body', { kind: 'drop', count: 1 }]]) {
  test(`${name} on an expert's range: retried, the text unchanged`, async () => {
    const s = await startServer(modelUrl, ARGS);
    try {
      faultAt(f);
      const r = await complete(s);
      assert.equal(r.status, 200, r.text);
      assert.equal(r.json.choices[0].text, reference.json.choices[0].text);
      assert.equal(served.faulted, f.kind === 'drop' ? 1 : 2, 'the expert was not read through the faulty range');
      const m = await assertQuiet(s.url);
      assert.ok(m.spool_weight_read_retries_total >= served.faulted, `retries ${m.spool_weight_read_retries_total}`);
      assert.equal(m.spool_requests_failed_total, 0);
    } finally {
      fault = null;
      await s.stop();
    }
  });
}

test('a range that keeps failing fails only the requests that need it, naming tensor, bytes, URL and status', async () => {
  const b = await promptAvoiding(mid);
  const s = await startServer(modelUrl, [...ARGS, '--http-retries', '2']);
  try {
    const warm = await complete(s, { prompt: b.prompt, max_tokens: b.max_tokens });
    assert.equal(warm.status, 200, warm.text);
    assert.equal(warm.json.choices[0].text, b.text);

    faultAt({ kind: 'status', status: 500 });
    const t0 = Date.now();
    const bad = await complete(s);
    const ms = Date.now() - t0;
    assert.equal(bad.status, 500, bad.text);
    assertErrorShape(assert, bad.json, 'engine_error');
    const msg = bad.json.error.message;
    const ranges = [...msg.matchAll(/tensor '(blk\.\d+\.ffn_\w+_exps\.weight#\d+)' bytes \[(\d+), (\d+)\)/g)];
    assert.ok(ranges.some((r) => Number(r[2]) <= mid && mid < Number(r[3])), `no named range holds byte ${mid}: ${msg}`);
    assert.ok(msg.includes(modelUrl), `the URL is not named: ${msg}`);
    assert.match(msg, /500/);
    assert.match(msg, /3 attempt/);  // the first and --http-retries 2
    assert.ok(ms < 10000, `the failure took ${ms} ms`);
    await assertQuiet(s.url);

    // The server goes on: a request whose experts are cached completes meanwhile.
    const other = await complete(s, { prompt: b.prompt, max_tokens: b.max_tokens });
    assert.equal(other.status, 200, other.text);
    assert.equal(other.json.choices[0].text, b.text);

    // The HTTP server heals: the failed request now completes with the fault-free text.
    fault = null;
    const good = await complete(s);
    assert.equal(good.status, 200, good.text);
    assert.equal(good.json.choices[0].text, reference.json.choices[0].text);
    const m = await assertQuiet(s.url);
    assert.equal(m.spool_requests_failed_total, 1);
    assert.equal((await fetch(`${s.url}/health`)).status, 200);
  } finally {
    fault = null;
    await s.stop();
  }
});

const STALL_MS = 6000;
test('a stalled range response holds only the request that needs it', { timeout: 90000 }, async () => {
  const b = await promptAvoiding(mid);
  const s = await startServer(modelUrl, [...ARGS, '--read-stall-ms', '300']);
  try {
    const warm = await complete(s, { prompt: b.prompt, max_tokens: b.max_tokens });
    assert.equal(warm.status, 200, warm.text);
    faultAt({ kind: 'stall', ms: STALL_MS, count: 1 });
    const t0 = Date.now();
    const stalled = complete(s).then((r) => ({ ...r, ms: Date.now() - t0 }));
    await new Promise((r) => setTimeout(r, 1000));
    assert.equal(served.faulted, 1, 'the expert read did not reach the stalling server');
    let answered = 0;
    while (Date.now() - t0 < STALL_MS - 1500) {
      const t = Date.now();
      const r = await complete(s, { prompt: b.prompt, max_tokens: b.max_tokens });
      const ms = Date.now() - t;
      assert.equal(r.status, 200, r.text);
      assert.equal(r.json.choices[0].text, b.text);
      assert.ok(ms < 1000, `a request needing nothing from the network took ${ms} ms during the stall`);
      ++answered;
    }
    assert.ok(answered >= 3, `only ${answered} requests were answered during the stall`);
    const done = await stalled;
    assert.equal(done.status, 200, done.text);
    assert.ok(done.ms >= STALL_MS - 500, `the stalled request finished after ${done.ms} ms`);
    assert.equal(done.json.choices[0].text, reference.json.choices[0].text);
    const m = await assertQuiet(s.url);
    assert.ok(m.spool_weight_read_stalls_total >= 1);
  } finally {
    fault = null;
    await s.stop();
  }
});
