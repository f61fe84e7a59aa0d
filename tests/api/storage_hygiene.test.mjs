// What a server keeps, and how a client removes it (issue 25), through the
// official `openai` client where it has a route (files.list / files.delete,
// batches) and fetch for the pipeline routes: DELETE for files, batches,
// pipeline runs and saved specs (409 while a batch or run has not ended, 404
// for unknown ids, the space given back); --max-queued-runs (429) and
// --max-storage (507) naming the option; the data dir 0700 and spool.db 0600;
// batch lines and grammars that are the client's mistake are 400s, never
// engine failures; and pipeline event ids that never repeat across kill -9.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { toFile } from 'openai';
import { startServer, waitFor, metric, STORIES } from './helpers.mjs';

let server, client, dataDir;
before(async () => {
  dataDir = path.join(mkdtempSync(path.join(tmpdir(), 'spool-hygiene-')), 'data');  // created by the server
  server = await startServer(STORIES, ['-c', '512', '--parallel', '4', '--data-dir', dataDir]);
  client = server.client();
});
after(async () => {
  if (server && server.proc.exitCode === null && server.proc.signalCode === null) await server.stop();
  else if (server) console.error(`spool serve died (${server.proc.exitCode ?? server.proc.signalCode}):\n${server.stderr().slice(-4000)}`);
  rmSync(path.dirname(dataDir), { recursive: true, force: true });
});

const jsonl = (requests) => requests.map((r) => JSON.stringify(r)).join('\n') + '\n';
const upload = async (text, c = client, name = 'batch.jsonl') =>
  c.files.create({ file: await toFile(Buffer.from(text), name), purpose: 'batch' });

async function api(url, route, body, method = body === undefined ? 'GET' : 'POST') {
  const res = await fetch(url + route, {
    method,
    headers: body === undefined ? {} : { 'Content-Type': 'application/json' },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  return { status: res.status, headers: res.headers, json: await res.json() };
}

async function batchUntil(c, id, statuses, timeoutMs = 60000) {
  let b;
  assert.ok(await waitFor(async () => statuses.includes((b = await c.batches.retrieve(id)).status), { timeoutMs }),
    `batch ${id} stuck at ${b?.status}`);
  return b;
}

async function runUntil(url, id, statuses, timeoutMs = 30000) {
  let run;
  assert.ok(await waitFor(async () => statuses.includes((run = (await api(url, `/v1/pipelines/${id}`)).json).status),
    { timeoutMs }), `run ${id} stuck at ${run?.status}`);
  return run;
}

const dbBytes = () => ['spool.db', 'spool.db-wal'].reduce((n, f) => {
  try { return n + statSync(path.join(dataDir, f)).size; } catch { return n; }
}, 0);

const longRequests = (n, prefix = 'r') => Array.from({ length: n }, (_, i) => ({
  custom_id: `${prefix}-${i}`, method: 'POST', url: '/v1/completions',
  body: { prompt: `Once upon a time ${i}`, max_tokens: 400, temperature: 0.9, stop: ['QQZZ'] },
}));

const longSpec = (agents = 1) => ({
  task: 'Once upon a time', temperature: 0, max_tokens: 400,
  agents: Array.from({ length: agents }, (_, i) => ({ name: `s${i}`, prompt: `{task} ${i}`, stop: ['QQZZ'] })),
});

test('the data dir is 0700 and the database files 0600', () => {
  assert.equal(statSync(dataDir).mode & 0o777, 0o700);
  for (const f of ['spool.db', 'spool.db-wal', 'spool.db-shm', 'spool.lock']) {
    assert.equal(statSync(path.join(dataDir, f)).mode & 0o777, 0o600, f);
  }
});

test('files: listed in OpenAI shape and pages, deleted with their content, 404 after', async () => {
  const ids = [];
  for (let i = 0; i < 3; i++) ids.push((await upload(`{"n": ${i}}\n`, client, `f${i}.jsonl`)).id);
  const page = (await api(server.url, '/v1/files')).json;
  assert.equal(page.object, 'list');
  assert.equal(page.has_more, false);
  for (const id of ids) assert.ok(page.data.some((f) => f.id === id && f.object === 'file' && f.purpose === 'batch'));
  // The client's auto-pagination follows has_more / after: every file once, newest first.
  const seen = [];
  for await (const f of client.files.list({ limit: 1 })) seen.push(f.id);
  assert.deepEqual(seen.filter((id) => ids.includes(id)), [...ids].reverse());
  assert.deepEqual((await client.files.list({ order: 'asc' })).data.map((f) => f.id).filter((id) => ids.includes(id)), ids);

  const deleted = await client.files.delete(ids[1]);
  assert.deepEqual(deleted, { id: ids[1], object: 'file', deleted: true });
  await assert.rejects(client.files.retrieve(ids[1]), (e) => e.status === 404);
  await assert.rejects(client.files.content(ids[1]), (e) => e.status === 404);
  await assert.rejects(client.files.delete(ids[1]), (e) => e.status === 404 && e.error?.param === 'file_id');
  await assert.rejects(client.files.delete('file-doesnotexist'), (e) => e.status === 404);
  assert.ok(!(await client.files.list()).data.some((f) => f.id === ids[1]));
  assert.ok((await client.files.retrieve(ids[0])).id === ids[0]);
});

test('deleting a large file gives its space back to the file system', async () => {
  const before = dbBytes();
  const big = await upload('x'.repeat(3 << 20), client, 'big.jsonl');
  assert.ok(dbBytes() >= before + (3 << 20), `${dbBytes()} after a 3 MiB upload, ${before} before`);
  await client.files.delete(big.id);
  assert.ok(dbBytes() < before + (1 << 20), `${dbBytes()} after deleting it, ${before} before`);
});

test('batches: DELETE is 409 until the batch has ended, then removes it with its output files', async () => {
  const input = await upload(jsonl(longRequests(64)));
  const b = await client.batches.create({ input_file_id: input.id, endpoint: '/v1/completions', completion_window: '24h' });
  const busy = await api(server.url, `/v1/batches/${b.id}`, undefined, 'DELETE');
  assert.equal(busy.status, 409, JSON.stringify(busy.json));
  assert.equal(busy.json.error.code, 'batch_not_finished');
  assert.match(busy.json.error.message, /cancel it first/);
  // Its input file cannot go either while it runs.
  await assert.rejects(client.files.delete(input.id), (e) => e.status === 409 && /batch_/.test(e.message));
  await client.batches.cancel(b.id);
  const cancelled = await batchUntil(client, b.id, ['cancelled']);
  const gone = await client.delete(`/batches/${b.id}`);
  assert.equal(gone.id, b.id);
  assert.equal(gone.deleted, true);
  await assert.rejects(client.batches.retrieve(b.id), (e) => e.status === 404);
  assert.ok(!(await client.batches.list()).data.some((x) => x.id === b.id));
  if (cancelled.output_file_id) await assert.rejects(client.files.retrieve(cancelled.output_file_id), (e) => e.status === 404);
  await client.files.delete(input.id);  // the batch has gone: its input file may go now

  const small = await client.batches.create({
    input_file_id: (await upload(jsonl([{ custom_id: 'a', method: 'POST', url: '/v1/completions', body: { prompt: 'Once', max_tokens: 4 } }]))).id,
    endpoint: '/v1/completions', completion_window: '24h',
  });
  const done = await batchUntil(client, small.id, ['completed']);
  assert.ok(done.output_file_id);
  const r = await api(server.url, `/v1/batches/${small.id}`, undefined, 'DELETE');
  assert.equal(r.status, 200, JSON.stringify(r.json));
  assert.deepEqual(r.json.deleted_files, [done.output_file_id]);
  await assert.rejects(client.files.retrieve(done.output_file_id), (e) => e.status === 404);
  assert.equal((await api(server.url, `/v1/batches/${small.id}`, undefined, 'DELETE')).status, 404);
  assert.equal((await api(server.url, '/v1/batches/batch_nope', undefined, 'DELETE')).status, 404);
});

test('pipeline runs and saved specs: DELETE is 409 while queued or running, 404 when unknown', async () => {
  const { json: { id } } = await api(server.url, '/v1/pipelines', longSpec(3));
  const busy = await api(server.url, `/v1/pipelines/${id}`, undefined, 'DELETE');
  assert.equal(busy.status, 409, JSON.stringify(busy.json));
  assert.equal(busy.json.error.code, 'run_not_finished');
  assert.match(busy.json.error.message, /cancel it first/);
  assert.equal((await api(server.url, `/v1/pipelines/${id}/cancel`, {})).status, 200);
  await runUntil(server.url, id, ['cancelled']);
  const del = await api(server.url, `/v1/pipelines/${id}`, undefined, 'DELETE');
  assert.equal(del.status, 200, JSON.stringify(del.json));
  assert.deepEqual(del.json, { id, object: 'pipeline.run', deleted: true });
  for (const route of [`/v1/pipelines/${id}`, `/v1/pipelines/${id}/logs`, `/v1/pipelines/${id}/events`]) {
    assert.equal((await fetch(server.url + route)).status, 404, route);
  }
  assert.ok(!(await api(server.url, '/v1/pipelines?limit=1000')).json.data.some((r) => r.id === id));
  assert.equal((await api(server.url, `/v1/pipelines/${id}`, undefined, 'DELETE')).status, 404);

  const spec = { temperature: 0, max_tokens: 4, agents: [{ name: 'x', prompt: '{input}' }] };
  const put = await fetch(`${server.url}/v1/pipeline-specs/tidy`, {
    method: 'PUT', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify(spec),
  });
  assert.equal(put.status, 200);
  const gone = await api(server.url, '/v1/pipeline-specs/tidy', undefined, 'DELETE');
  assert.equal(gone.status, 200, JSON.stringify(gone.json));
  assert.deepEqual(gone.json, { name: 'tidy', object: 'pipeline.spec', deleted: true });
  assert.equal((await api(server.url, '/v1/pipeline-specs/tidy')).status, 404);
  assert.ok(!(await api(server.url, '/v1/pipeline-specs')).json.data.includes('tidy'));
  assert.equal((await api(server.url, '/v1/pipeline-specs/tidy', undefined, 'DELETE')).status, 404);
});

test('batch lines with "method": 5 or "stream": "yes" are 400s naming the line; bad request bodies are per-line 400s', async () => {
  const ok = { custom_id: 'a', method: 'POST', url: '/v1/completions', body: { prompt: 'Once', max_tokens: 4 } };
  for (const [bad, field] of [[{ ...ok, custom_id: 'b', method: 5 }, /'method'/],
    [{ ...ok, custom_id: 'b', body: { prompt: 'Once', stream: 'yes' } }, /stream/]]) {
    const file = await upload(jsonl([ok, bad]));
    await assert.rejects(client.batches.create({ input_file_id: file.id, endpoint: '/v1/completions', completion_window: '24h' }),
      (e) => e.status === 400 && /line 2/.test(e.message) && field.test(e.message) && e.code === 'invalid_batch_file');
  }
  const failedBefore = await metric(server.url, 'spool_requests_failed_total');
  const b = await client.batches.create({
    input_file_id: (await upload(jsonl([ok,
      { ...ok, custom_id: 'grammar', body: { prompt: 'Once', max_tokens: 4, grammar: 'root ::= root' } },
      { ...ok, custom_id: 'schema', url: '/v1/completions', body: { prompt: 'Once', max_tokens: 4, response_format: { type: 'json_schema', json_schema: { name: 's', schema: { $ref: '#' } } } } },
      { ...ok, custom_id: 'typed', body: { prompt: 'Once', max_tokens: 'many' } }]))).id,
    endpoint: '/v1/completions', completion_window: '24h',
  });
  const done = await batchUntil(client, b.id, ['completed', 'failed']);
  assert.equal(done.status, 'completed');
  assert.deepEqual(done.request_counts, { total: 4, completed: 1, failed: 3 });
  const errs = (await (await client.files.content(done.error_file_id)).text()).trim().split('\n').map((l) => JSON.parse(l));
  assert.deepEqual(errs.map((e) => [e.custom_id, e.response.status_code]), [['grammar', 400], ['schema', 400], ['typed', 400]]);
  assert.equal(errs[0].response.body.error.param, 'grammar');
  assert.equal(errs[1].response.body.error.param, 'response_format');
  // None of them reached the engine as a failure.
  assert.equal(await metric(server.url, 'spool_requests_failed_total'), failedBefore);
});

test('a grammar or schema that can never end is a 400 naming the field, not a 500', async () => {
  await assert.rejects(client.completions.create({ prompt: 'Once', max_tokens: 4, grammar: 'root ::= root' }),
    (e) => e.status === 400 && e.param === 'grammar' && /can never end/.test(e.message));
  await assert.rejects(client.completions.create({ prompt: 'Once', max_tokens: 4, grammar: 'root ::= "a" x\nx ::= "b" x' }),
    (e) => e.status === 400 && e.param === 'grammar');
  await assert.rejects(client.completions.create({
    prompt: 'Once', max_tokens: 4,
    response_format: { type: 'json_schema', json_schema: { name: 'loop', schema: { $ref: '#' } } },
  }), (e) => e.status === 400 && e.param === 'response_format' && /can never end/.test(e.message));
  // A recursive schema with a way out still works.
  const tree = await client.completions.create({
    prompt: 'Once', max_tokens: 48, temperature: 0,
    response_format: { type: 'json_schema', json_schema: { name: 'tree', schema: {
      type: 'object', properties: { kids: { type: 'array', maxItems: 1, items: { $ref: '#' } } } } } },
  });
  assert.equal(tree.choices.length, 1);
});

test('--max-queued-runs: one more pipeline run or batch waiting gets 429 naming the option', async () => {
  const s = await startServer(STORIES, ['-c', '1024', '--max-runs', '1', '--max-queued-runs', '2']);
  const c = s.client();
  try {
    const first = (await api(s.url, '/v1/pipelines', longSpec(4))).json.id;
    await runUntil(s.url, first, ['running']);  // started: no longer queued
    const queued = [];
    for (let i = 0; i < 2; i++) {
      const r = await api(s.url, '/v1/pipelines', longSpec(1));
      assert.equal(r.status, 200, JSON.stringify(r.json));
      queued.push(r.json.id);
    }
    const full = await api(s.url, '/v1/pipelines', longSpec(1));
    assert.equal(full.status, 429, JSON.stringify(full.json));
    assert.equal(full.json.error.code, 'too_many_queued_runs');
    assert.match(full.json.error.message, /--max-queued-runs 2/);
    // Batches wait in the same queue.
    const file = await upload(jsonl(longRequests(2)), c);
    await assert.rejects(c.batches.create({ input_file_id: file.id, endpoint: '/v1/completions', completion_window: '24h' }),
      (e) => e.status === 429 && /--max-queued-runs/.test(e.message));
    // A cancelled queued run gives its place back.
    assert.equal((await api(s.url, `/v1/pipelines/${queued[0]}/cancel`, {})).status, 200);
    assert.equal((await api(s.url, '/v1/pipelines', longSpec(1))).status, 200);
  } finally {
    await s.stop();
  }
});

test('--max-storage: an upload, a saved spec or a run over it gets 507 naming the option, until something is deleted', async () => {
  const s = await startServer(STORIES, ['-c', '512', '--max-storage', '1M']);
  const c = s.client();
  try {
    const first = await upload('y'.repeat(600 << 10), c);
    let err;
    await assert.rejects(upload('z'.repeat(600 << 10), c), (e) => (err = e).status === 507);
    assert.equal(err.code, 'storage_limit_exceeded');
    assert.match(err.message, /--max-storage 1\.00 MiB/);
    assert.match(err.message, /holds \d/);
    assert.match(err.message, /DELETE/);
    const run = await api(s.url, '/v1/pipelines', { ...longSpec(1), input: 'w'.repeat(600 << 10) });
    assert.equal(run.status, 507, JSON.stringify(run.json));
    assert.equal(run.headers.get('x-should-retry'), 'false');  // the openai clients do not retry it
    const spec = await fetch(`${s.url}/v1/pipeline-specs/big`, {
      method: 'PUT', headers: { 'Content-Type': 'application/json' },
      body: JSON.stringify({ ...longSpec(1), task: 'v'.repeat(600 << 10) }),
    });
    assert.equal(spec.status, 507);
    await c.files.delete(first.id);
    await upload('z'.repeat(600 << 10), c);  // fits again
  } finally {
    await s.stop();
  }
});

// Reads an SSE stream until `enough(events)` or its end; returns the events ({id, type, data}).
async function readEvents(url, headers = {}, enough = () => false) {
  const res = await fetch(url, { headers });
  assert.equal(res.status, 200);
  const reader = res.body.getReader();
  const decoder = new TextDecoder();
  const events = [];
  let buf = '';
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buf += decoder.decode(value, { stream: true });
    let cut;
    while ((cut = buf.indexOf('\n\n')) >= 0) {
      const block = buf.slice(0, cut);
      buf = buf.slice(cut + 2);
      const id = /^id: (\d+)$/m.exec(block);
      if (!id) continue;
      events.push({ id: Number(id[1]), type: /^event: (.*)$/m.exec(block)[1], data: JSON.parse(/^data: (.*)$/m.exec(block)[1]) });
    }
    if (enough(events)) {
      await reader.cancel();
      break;
    }
  }
  return events;
}

test('kill -9 mid-step: after the restart, event ids go on above every id sent, so Last-Event-ID sees the step restart', async () => {
  const dir = mkdtempSync(path.join(tmpdir(), 'spool-ids-'));
  try {
    // Steps of ~3000 tokens (about a second each here): the kill lands in the step whose tokens were read.
    const args = ['-c', '4096', '--data-dir', dir];
    const spec = { ...longSpec(2), max_tokens: 3000 };
    let s = await startServer(STORIES, args);
    const { json: { id } } = await api(s.url, '/v1/pipelines', spec);
    const seen = await readEvents(`${s.url}/v1/pipelines/${id}/events`, {},
      (evs) => evs.filter((e) => e.type === 'token').length >= 20);
    s.proc.kill('SIGKILL');
    await new Promise((r) => s.proc.on('exit', r));
    const last = Math.max(...seen.map((e) => e.id));
    const running = seen.filter((e) => e.type === 'start').at(-1).data.agent;
    s = await startServer(STORIES, args);
    try {
      const rest = await readEvents(`${s.url}/v1/pipelines/${id}/events`, { 'Last-Event-ID': String(last) });
      assert.ok(rest.length > 0);
      for (const e of rest) assert.ok(e.id > last, `event ${e.id} (${e.type}) after Last-Event-ID ${last}`);
      for (let i = 1; i < rest.length; i++) assert.ok(rest[i].id > rest[i - 1].id);
      // Every step's tokens come after its start: a client resuming misses nothing of a restarted step.
      const started = new Set();
      for (const e of rest) {
        if (e.type === 'start') started.add(e.data.agent);
        if (e.type === 'token') assert.ok(started.has(e.data.agent), `token ${e.id} of ${e.data.agent} before its start`);
      }
      // The step running at the kill ran again, from its start, under ids above `last`.
      assert.equal(rest[0].type, 'start', JSON.stringify(rest.slice(0, 3)));
      assert.equal(rest[0].data.agent, running);
      assert.ok(rest.some((e) => e.type === 'token' && e.data.agent === running));
      assert.equal(rest.at(-1).type, 'done');
      assert.equal(rest.at(-1).data.status, 'completed');
      // Every id of the run, before and after the restart, once.
      const all = await readEvents(`${s.url}/v1/pipelines/${id}/events`);
      assert.equal(new Set(all.map((e) => e.id)).size, all.length);
    } finally {
      await s.stop();
    }
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
