// Storage faults through `spool serve` (issue 16): a streamed MoE model
// (the deepseek3-fp8-tiny fixture under a --mem-budget that leaves its experts
// on disk) with SPOOL_STORAGE_FAULTS failing or stalling reads of one expert.
// The request that needs the bytes gets an OpenAI error naming the tensor and
// byte range; its KV blocks are freed; the same request after the transient
// fault completes with the tokens of a server without faults; a stalled read
// is cut off by --request-timeout; /health stays ok throughout.
import { test, before } from 'node:test';
import assert from 'node:assert/strict';
import path from 'node:path';
import { startServer, SHARED, assertErrorShape } from './helpers.mjs';
import { assertQuiet, metrics } from './raw_http.mjs';
import { ggufTensors } from './gguf_tensors.mjs';

const MODEL = path.join(SHARED, 'fixtures/gguf/deepseek3-fp8-tiny.f32.gguf');
const ARGS = ['-c', '256', '--mem-budget', process.env.SPOOL_FAULTS_MEM_BUDGET ?? '16M', '--no-speculate'];
const REQUEST = { prompt: [1, 200, 300, 400], max_tokens: 64, temperature: 0 };

let expert, mid, reference;
before(async () => {
  // The last expert tensor in the file: the load reads only the resident set, not it.
  const tensors = ggufTensors(MODEL).filter((t) => t.name.includes('_exps'));
  expert = tensors[tensors.length - 1];
  mid = Math.floor((expert.begin + expert.end) / 2);
  const s = await startServer(MODEL, ARGS);
  try {
    const m = await metrics(s.url);
    assert.ok(m.spool_weight_bytes_read_total !== undefined, 'the model does not stream under ' + ARGS.join(' '));
    reference = await complete(s);
    assert.equal(reference.status, 200, reference.text);
  } finally {
    await s.stop();
  }
});

async function complete(s, extra = {}) {
  const r = await fetch(`${s.url}/v1/completions`, {
    method: 'POST', headers: { 'Content-Type': 'application/json' },
    body: JSON.stringify({ ...REQUEST, ...extra }),
  });
  const text = await r.text();
  let json = null;
  try {
    json = JSON.parse(text);
  } catch {}
  return { status: r.status, text, json };
}

function assertNamesTheRange(message) {
  const m = /tensor '([^']+)' bytes \[(\d+), (\d+)\)/.exec(message);
  assert.ok(m, message);
  assert.ok(m[1].startsWith(expert.name), `${m[1]} is not part of ${expert.name}: ${message}`);
  assert.ok(Number(m[2]) <= mid && mid < Number(m[3]), `[${m[2]}, ${m[3]}) does not hold ${mid}: ${message}`);
  assert.match(message, /Input\/output error/);
}

test('EIO on an expert fails the requests that read it, naming tensor and bytes; the next one completes', async () => {
  const s = await startServer(MODEL, ARGS, { env: { SPOOL_STORAGE_FAULTS: `eio@${mid}-${mid + 1}#2` } });
  try {
    const bad = await complete(s);
    assert.equal(bad.status, 500, bad.text);
    assertErrorShape(assert, bad.json, 'engine_error');
    assertNamesTheRange(bad.json.error.message);
    await assertQuiet(s.url);

    // Streamed: the error arrives as an event.
    const r = await fetch(`${s.url}/v1/completions`, {
      method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify({ ...REQUEST, stream: true }),
    });
    assert.equal(r.status, 200);
    const events = (await r.text()).split('\n').filter((l) => l.startsWith('data: ')).map((l) => l.slice(6));
    const err = events.map((e) => { try { return JSON.parse(e); } catch { return null; } }).find((e) => e?.error);
    assert.ok(err, events.join('\n'));
    assertNamesTheRange(err.error.message);
    const m = await assertQuiet(s.url);
    assert.equal(m.spool_requests_failed_total, 2);

    const good = await complete(s);  // the fault was transient (#2)
    assert.equal(good.status, 200, good.text);
    assert.equal(good.json.choices[0].text, reference.json.choices[0].text);
    await assertQuiet(s.url);
  } finally {
    await s.stop();
  }
});

test('a read stalled past --request-timeout ends the request with 504; the server goes on', async () => {
  const s = await startServer(MODEL, [...ARGS, '--request-timeout', '1'],
                              { env: { SPOOL_STORAGE_FAULTS: `delay=4000@${mid}-${mid + 1}#1` } });
  try {
    const t0 = Date.now();
    const slow = await complete(s);
    const ms = Date.now() - t0;
    assert.equal(slow.status, 504, slow.text);
    assertErrorShape(assert, slow.json, 'request_timeout');
    assert.ok(ms >= 900 && ms < 3000, `answered after ${ms} ms`);
    const health = await fetch(`${s.url}/health`);
    assert.equal(health.status, 200);
    const m = await assertQuiet(s.url, { timeoutMs: 15000 });  // the step finishes once the read returns
    assert.equal(m.spool_requests_cancelled_total, 1);
    const good = await complete(s);
    assert.equal(good.status, 200, good.text);
    assert.equal(good.json.choices[0].text, reference.json.choices[0].text);
  } finally {
    await s.stop();
  }
});
