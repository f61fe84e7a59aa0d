// The OpenAI Batch API through the official `openai` npm client, unmodified:
// 20 requests in, 20 results out with matching custom_id and the same text as
// each request sent alone at temperature 0; cancel; a bad input file is a 400
// naming the line; kill -9 in the middle of a batch and a restart on the same
// data dir: it is still listed and ends completed, finished requests kept;
// requests with a shared prefix reuse its KV, from the disk tier after a
// kill -9 and restart.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { toFile } from 'openai';
import { startServer, waitFor, metric, STORIES } from './helpers.mjs';

let server, client;
before(async () => {
  server = await startServer(STORIES, ['-c', '512', '--parallel', '8']);
  client = server.client();
});
after(async () => server && (await server.stop()));

const prompts = Array.from({ length: 20 }, (_, i) =>
  `Once upon a time, ${['Lily', 'Tom', 'Max', 'Sue', 'Ben'][i % 5]} ${['saw', 'found', 'wanted', 'had'][i % 4]} a`);

function jsonl(requests) {
  return requests.map((r) => JSON.stringify(r)).join('\n') + '\n';
}

async function upload(text, c = client) {
  return c.files.create({ file: await toFile(Buffer.from(text), 'batch.jsonl'), purpose: 'batch' });
}

async function until(c, id, statuses, timeoutMs = 60000) {
  let b;
  const ok = await waitFor(async () => {
    b = await c.batches.retrieve(id);
    return statuses.includes(b.status);
  }, { timeoutMs, stepMs: 50 });
  assert.ok(ok, `batch ${id} stuck at ${b?.status}`);
  return b;
}

async function results(c, fileId) {
  const text = await (await c.files.content(fileId)).text();
  return text.trim().split('\n').map((l) => JSON.parse(l));
}

test('20 requests in, 20 results out, each equal to the request sent alone', async () => {
  const requests = prompts.map((p, i) => ({
    custom_id: `req-${i}`, method: 'POST', url: '/v1/completions',
    body: { model: server.modelId, prompt: p, max_tokens: 16, temperature: 0 },
  }));
  const file = await upload(jsonl(requests));
  assert.equal(file.purpose, 'batch');
  const created = await client.batches.create({ input_file_id: file.id, endpoint: '/v1/completions', completion_window: '24h', metadata: { job: 'test' } });
  assert.ok(['validating', 'in_progress'].includes(created.status));
  const done = await until(client, created.id, ['completed', 'failed']);
  assert.equal(done.status, 'completed');
  assert.deepEqual(done.request_counts, { total: 20, completed: 20, failed: 0 });
  assert.equal(done.metadata.job, 'test');
  const out = await results(client, done.output_file_id);
  assert.deepEqual(out.map((r) => r.custom_id), requests.map((r) => r.custom_id));
  for (let i = 0; i < 20; i++) {
    assert.equal(out[i].response.status_code, 200);
    const alone = await client.completions.create({ model: server.modelId, prompt: prompts[i], max_tokens: 16, temperature: 0 });
    assert.equal(out[i].response.body.choices[0].text, alone.choices[0].text, `custom_id req-${i}`);
  }
  const listed = await client.batches.list();
  assert.ok(listed.data.some((b) => b.id === created.id));
});

test('a request that fails validation goes to the error file; the rest complete', async () => {
  const requests = [
    { custom_id: 'ok', method: 'POST', url: '/v1/completions', body: { prompt: 'Once upon a time', max_tokens: 4, temperature: 0 } },
    { custom_id: 'bad', method: 'POST', url: '/v1/completions', body: { prompt: 'Once', max_tokens: -3 } },
  ];
  const b = await client.batches.create({ input_file_id: (await upload(jsonl(requests))).id, endpoint: '/v1/completions', completion_window: '24h' });
  const done = await until(client, b.id, ['completed', 'failed']);
  assert.deepEqual(done.request_counts, { total: 2, completed: 1, failed: 1 });
  const errs = await results(client, done.error_file_id);
  assert.equal(errs[0].custom_id, 'bad');
  assert.equal(errs[0].response.status_code, 400);
  assert.equal(errs[0].response.body.error.param, 'max_tokens');
});

test('a malformed input file is refused when the batch is created, naming the line', async () => {
  const file = await upload('{"custom_id": "a", "method": "POST", "url": "/v1/completions", "body": {"prompt": "x"}}\nnot json\n');
  await assert.rejects(client.batches.create({ input_file_id: file.id, endpoint: '/v1/completions', completion_window: '24h' }),
    (e) => e.status === 400 && /line 2/.test(e.message));
  const wrongUrl = await upload('{"custom_id": "a", "method": "POST", "url": "/v1/embeddings", "body": {}}\n');
  await assert.rejects(client.batches.create({ input_file_id: wrongUrl.id, endpoint: '/v1/completions', completion_window: '24h' }),
    (e) => e.status === 400 && /line 1/.test(e.message));
  await assert.rejects(client.batches.create({ input_file_id: 'file-nope', endpoint: '/v1/completions', completion_window: '24h' }),
    (e) => e.status === 404);
});

test('cancel stops a batch; what finished is kept', async () => {
  const requests = Array.from({ length: 200 }, (_, i) => ({
    custom_id: `c-${i}`, method: 'POST', url: '/v1/completions',
    body: { prompt: prompts[i % 20], max_tokens: 400, temperature: 0.9, stop: ['QQZZ'] },
  }));
  const b = await client.batches.create({ input_file_id: (await upload(jsonl(requests))).id, endpoint: '/v1/completions', completion_window: '24h' });
  await until(client, b.id, ['in_progress']);
  const c = await client.batches.cancel(b.id);
  assert.ok(['cancelling', 'cancelled'].includes(c.status), c.status);
  const done = await until(client, b.id, ['cancelled']);
  assert.ok(done.request_counts.completed < 200, JSON.stringify(done.request_counts));
  // The requests in flight at the cancel are counted as cancelled, under the batch source and in the total.
  const byBatch = await metric(server.url, 'spool_requests_cancelled_total{source="batch"}');
  assert.ok(byBatch >= 1, `batch requests cancelled: ${byBatch}`);
  assert.ok(await metric(server.url, 'spool_requests_cancelled_total') >= byBatch);
  assert.equal(await metric(server.url, 'spool_requests_failed_total{source="batch"}'), 0);
});

test('kill -9 in the middle of a batch, restart on the same data dir: listed, completed, finished requests kept', async () => {
  const dir = mkdtempSync(path.join(tmpdir(), 'spool-batch-kill-'));
  try {
    let s = await startServer(STORIES, ['-c', '512', '--parallel', '2', '--data-dir', dir]);
    let c = s.client();
    const requests = Array.from({ length: 24 }, (_, i) => ({
      custom_id: `k-${i}`, method: 'POST', url: '/v1/completions',
      body: { prompt: prompts[i % 20], max_tokens: 400, temperature: 0, stop: ['QQZZ'] },
    }));
    const b = await c.batches.create({ input_file_id: (await upload(jsonl(requests), c)).id, endpoint: '/v1/completions', completion_window: '24h' });
    // Wait until some requests are done (results are stored one by one), then kill.
    let before = 0;
    assert.ok(await waitFor(async () => (before = (await c.batches.retrieve(b.id)).request_counts.completed) >= 2,
      { timeoutMs: 60000, stepMs: 5 }));
    s.proc.kill('SIGKILL');
    await new Promise((r) => s.proc.on('exit', r));
    s = await startServer(STORIES, ['-c', '512', '--parallel', '2', '--data-dir', dir]);
    c = s.client();
    try {
      assert.ok((await c.batches.list()).data.some((x) => x.id === b.id));
      const done = await until(c, b.id, ['completed', 'failed'], 120000);
      assert.equal(done.status, 'completed');
      assert.equal(done.request_counts.completed, 24);
      const out = await results(c, done.output_file_id);
      assert.deepEqual(out.map((r) => r.custom_id), requests.map((r) => r.custom_id));
      assert.match(s.stderr(), new RegExp(`\\[batch:${b.id}\\] RESUMED after restart`));
      // The requests finished before the kill were not run again.
      const kept = Number(new RegExp(`\\[batch:${b.id}\\] RUNNING 24 requests \\((\\d+) done before\\)`).exec(s.stderr())[1]);
      assert.ok(kept >= before && kept < 24, `kept ${kept}, done before the kill ${before}`);
    } finally {
      await s.stop();
    }
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test('batch requests with a shared prefix reuse its KV, from the disk tier after a kill -9 and restart', async () => {
  const dir = mkdtempSync(path.join(tmpdir(), 'spool-batch-prefix-'));
  const shared = 'Once upon a time, there was a little girl named Lily. She lived in a small house with her mom and ' +
    'dad. Every day she played in the garden with her big brown dog, and every night she looked at the stars. ';
  const names = ['Tom', 'Max', 'Sue', 'Ben', 'Amy', 'Sam', 'Zoe', 'Tim'];
  const batch = (tag) => names.map((n, i) => ({
    custom_id: `${tag}-${i}`, method: 'POST', url: '/v1/completions',
    body: { prompt: `${shared}One day ${n} ${tag === 'a' ? 'came' : 'ran'} to`, max_tokens: 8, temperature: 0 },
  }));
  const run = async (c, tag) => {
    const b = await c.batches.create({ input_file_id: (await upload(jsonl(batch(tag)), c)).id, endpoint: '/v1/completions', completion_window: '24h' });
    const done = await until(c, b.id, ['completed', 'failed']);
    assert.equal(done.status, 'completed');
    return (await results(c, done.output_file_id)).map((r) => r.response.body.usage);
  };
  const args = ['-c', '512', '--parallel', '2', '--data-dir', dir];
  try {
    let s = await startServer(STORIES, args);
    let usage;
    try {
      const solo = await s.client().completions.create({ prompt: shared, max_tokens: 1, temperature: 0 });
      const prefix = solo.usage.prompt_tokens;
      assert.ok(prefix >= 64, `${prefix} prefix tokens`);
      usage = await run(s.client(), 'a');
      // Every request finds the shared prefix's full blocks (16 positions) computed (by the request above).
      for (const u of usage) assert.ok(u.prompt_tokens_details.cached_tokens >= prefix - 16 - 1, JSON.stringify(usage));
      assert.ok(await waitFor(async () => (await metric(s.url, 'spool_kv_disk_pending_writes')) === 0));
      s.proc.kill('SIGKILL');
      await new Promise((r) => s.proc.on('exit', r));
      s = await startServer(STORIES, args);
      usage = await run(s.client(), 'b');
      for (const u of usage) assert.ok(u.prompt_tokens_details.cached_tokens >= prefix - 16 - 1, JSON.stringify(usage));
      // After the restart the prefix came from disk, not from a recomputation.
      assert.ok(await metric(s.url, 'spool_kv_disk_hit_tokens_total') >= prefix - 16 - 1);
    } finally {
      await s.stop();
    }
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
