// Prefix reuse for a hybrid model (Qwen3-Next, tiny fixture) through a real
// `spool serve --state-snapshots`: requests sharing a long prefix restore the
// recurrent state at the last snapshot before it (usage cached_tokens, /metrics
// spool_state_snapshot_*), and answer exactly what a server without prefix
// reuse answers, logprobs included. Without the flag the prefix cache stays off.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import path from 'node:path';
import { startServer, metric, waitFor, SHARED } from './helpers.mjs';

const MODEL = path.join(SHARED, 'fixtures/qwen3next-tiny');
const INTERVAL = 64;
let on, off;
before(async () => {
  [on, off] = await Promise.all([
    startServer(MODEL, ['-c', '2048', '--parallel', '4', '--state-snapshots', '4', '--snapshot-interval', `${INTERVAL}`]),
    startServer(MODEL, ['-c', '2048', '--parallel', '4']),
  ]);
});
after(async () => {
  await Promise.all([on && on.stop(), off && off.stop()]);
});

async function tokenize(server, content) {
  const r = await fetch(`${server.url}/tokenize`, { method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify({ content, add_special: true }) });
  return (await r.json()).tokens;
}

function context(nWords) {
  const words = ['plan', 'the', 'agent', 'reads', 'file', 'and', 'writes', 'a', 'summary', 'of', 'each', 'step', 'tool',
    'result', 'then', 'checks', 'output', 'for', 'errors', 'before', 'next', 'task', 'in', 'queue'];
  let x = 777;
  const out = [];
  for (let i = 0; i < nWords; i++) {
    x = (x * 1103515245 + 12345) % 2147483648;
    out.push(words[x % words.length]);
  }
  return out.join(' ') + '.';
}

const ask = (server, prompt) => server.client().completions.create(
  { prompt, max_tokens: 8, temperature: 0, ignore_eos: true, logprobs: 0 });

test('hybrid requests sharing a prefix restore a state snapshot and answer as without reuse', async () => {
  assert.equal(await metric(off.url, 'spool_prefix_cache_enabled'), 0);
  assert.equal(await metric(on.url, 'spool_prefix_cache_enabled'), 1);
  assert.equal(await metric(on.url, 'spool_state_snapshots'), 0);
  const prefix = 'System: you are one agent of a pipeline. Shared context: ' + context(260);
  const prompts = ['planner', 'executor', 'reviewer', 'summarizer'].map((r) => `${prefix}\nYou are the ${r}. Go:`);
  const ids = await Promise.all(prompts.map((p) => tokenize(on, p)));
  let common = 0;
  while (ids.every((t) => t[common] === ids[0][common])) common++;
  assert.ok(common >= 2 * INTERVAL, `shared prefix is only ${common} tokens`);
  const restorable = Math.floor(common / INTERVAL) * INTERVAL;

  const want = [];
  for (const p of prompts) want.push(await ask(off, p));
  // The first computes the prefix (snapshots every 64 positions); the others, sent together, restore it.
  const got = [await ask(on, prompts[0])];
  got.push(...(await Promise.all(prompts.slice(1).map((p) => ask(on, p)))));
  got.forEach((r, i) => {
    assert.equal(r.choices[0].text, want[i].choices[0].text, `prompt ${i}`);
    assert.deepEqual(r.choices[0].logprobs.token_logprobs, want[i].choices[0].logprobs.token_logprobs, `prompt ${i}`);
    assert.equal(r.usage.prompt_tokens, ids[i].length);
    assert.equal(want[i].usage.prompt_tokens_details?.cached_tokens ?? 0, 0);
  });
  assert.equal(got[0].usage.prompt_tokens_details?.cached_tokens ?? 0, 0);
  for (const r of got.slice(1)) assert.equal(r.usage.prompt_tokens_details.cached_tokens, restorable);
  assert.equal(await metric(on.url, 'spool_state_snapshot_hits_total'), 3);
  assert.equal(await metric(on.url, 'spool_state_snapshot_misses_total'), 1);
  assert.equal(await metric(on.url, 'spool_prefix_cache_hit_tokens_total'), 3 * restorable);
  const computedOn = await metric(on.url, 'spool_computed_tokens_total');
  const computedOff = await metric(off.url, 'spool_computed_tokens_total');
  assert.equal(computedOff - computedOn, 3 * restorable);
  const count = await metric(on.url, 'spool_state_snapshots');
  assert.ok(count > 0 && count <= 4, `snapshots ${count}`);
  const bytes = await metric(on.url, 'spool_state_snapshot_bytes');
  assert.ok(bytes > 0 && bytes % count === 0, `snapshot bytes ${bytes}`);
  const engine = (await (await fetch(`${on.url}/v1/stats`)).json()).models[0].engine;
  assert.equal(engine.state_snapshots, count);
  assert.equal(engine.state_snapshot_bytes, bytes);
  assert.equal(engine.state_snapshot_hits, 3);
  // The per-request states are freed; only the snapshots remain.
  assert.ok(await waitFor(async () => (await metric(on.url, 'spool_recurrent_sequences')) === 0));
  assert.equal(await metric(on.url, 'spool_recurrent_state_bytes'), 0);
});
