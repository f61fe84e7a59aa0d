// The agent runtime against a real `spool serve` on loopback (stories260K):
// chains pass outputs along, fan-out and join, rounds stop at the marker and
// at max_rounds, the two user shapes in examples/agents run as written,
// injected failures are retried (and a third failure ends the run), cancel
// frees the run's KV blocks, each context policy, bad specs get 400s naming
// the field with nothing stored, events resume with Last-Event-ID, saved
// specs, and kill -9 in the middle of a run followed by a restart on the same
// data dir resumes it without re-running finished steps.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { startServer, metric, waitFor, STORIES } from './helpers.mjs';

const here = path.dirname(fileURLToPath(import.meta.url));
const examples = path.resolve(here, '../../examples/agents');

let server;
before(async () => {
  server = await startServer(STORIES, ['-c', '1024', '--parallel', '8'], {
    env: { SPOOL_FAILPOINTS: 'agent:flaky:1,agent:broken:3' },
  });
});
after(async () => server && (await server.stop()));

async function api(url, route, body, method = body === undefined ? 'GET' : 'POST') {
  const res = await fetch(url + route, {
    method,
    headers: { 'Content-Type': 'application/json' },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  return { status: res.status, json: await res.json() };
}

async function submit(spec, url = server.url) {
  const r = await api(url, '/v1/pipelines', spec);
  assert.equal(r.status, 200, JSON.stringify(r.json));
  assert.equal(r.json.status, 'queued');
  return r.json.id;
}

async function finished(id, url = server.url, timeoutMs = 30000) {
  let run;
  const ok = await waitFor(async () => {
    run = (await api(url, `/v1/pipelines/${id}`)).json;
    return ['completed', 'failed', 'cancelled'].includes(run.status);
  }, { timeoutMs, stepMs: 50 });
  assert.ok(ok, `run ${id} did not end: ${JSON.stringify(run)}`);
  return run;
}

const step = (run, name, round = 1) => run.agents.find((a) => a.name === name && a.round === round);

// What the model writes for this exact prompt alone (temperature 0).
async function complete(prompt, maxTokens) {
  const r = await api(server.url, '/v1/completions', { prompt, max_tokens: maxTokens, temperature: 0 });
  assert.equal(r.status, 200, JSON.stringify(r.json));
  return r.json.choices[0].text;
}

test('a sequential chain passes each output to the next agent', async () => {
  const id = await submit({
    task: 'Once upon a time',
    temperature: 0,
    max_tokens: 12,
    agents: [
      { name: 'a', prompt: '{task} there was' },
      { name: 'b', prompt: '{previous} Then the' },
      { name: 'c', prompt: 'Lily said {agents.a.output} and {agents.b.output}' },
    ],
  });
  const run = await finished(id);
  assert.equal(run.status, 'completed', JSON.stringify(run));
  const [a, b, c] = ['a', 'b', 'c'].map((n) => step(run, n));
  assert.equal(a.output, await complete('Once upon a time there was', 12));
  assert.equal(b.output, await complete(`${a.output} Then the`, 12));
  assert.equal(c.output, await complete(`Lily said ${a.output} and ${b.output}`, 12));
  for (const s of [a, b, c]) {
    assert.equal(s.status, 'done');
    assert.equal(s.attempts, 1);
    assert.equal(s.tokens, 12);
  }
});

test('fan-out decodes the executors together and the join sees every output', async () => {
  const shared = 'Once upon a time there was a little girl named Lily. She lived in a house near a big forest with her mom, her dad and her dog Max. ';
  const id = await submit({
    task: shared,
    temperature: 0,
    max_tokens: 10,
    agents: [
      { name: 'plan', prompt: '{task}One day' },
      ...['e1', 'e2', 'e3', 'e4'].map((n, i) => ({ name: n, prompt: `{task}{agents.plan.output} ${['Max', 'Lily', 'Mom', 'Dad'][i]}` })),
      { name: 'join', prompt: 'Together: {previous}' },
    ],
    stages: ['plan', { parallel: ['e1', 'e2', 'e3', 'e4'] }, 'join'],
  });
  const run = await finished(id);
  assert.equal(run.status, 'completed', JSON.stringify(run));
  const ex = ['e1', 'e2', 'e3', 'e4'].map((n) => step(run, n));
  // Submitted together: every executor starts before any of them finishes.
  const lastStart = Math.max(...ex.map((s) => s.started_at));
  const firstEnd = Math.min(...ex.map((s) => s.finished_at));
  assert.ok(lastStart <= firstEnd, `executors ran one after another: ${JSON.stringify(ex)}`);
  // The shared context is prefilled once: the others reuse its blocks.
  const cached = ex.filter((s) => s.cached_tokens > 0).length;
  assert.ok(cached >= 3, `cached tokens per executor: ${ex.map((s) => s.cached_tokens)}`);
  const joined = ex.map((s, i) => `[e${i + 1}]\n${s.output}`).join('\n\n');
  assert.equal(step(run, 'join').output, await complete(`Together: ${joined}`, 10));
});

test('rounds stop at the marker, or at max_rounds', async () => {
  const spec = (until) => ({
    task: 'Once upon a time',
    temperature: 0,
    max_tokens: 16,
    agents: [{ name: 'w', prompt: '{task} (round {round}) {previous}' }],
    stages: [{ rounds: ['w'], until, max_rounds: 3 }],
  });
  const never = await finished(await submit(spec('QQZZ-never')));
  assert.equal(never.status, 'completed');
  assert.deepEqual(never.agents.map((a) => a.round), [1, 2, 3]);
  // A word of round 1's output stops the group after round 1.
  const marker = step(never, 'w', 1).output.trim().split(/\s+/)[0];
  assert.ok(marker && marker.length > 0);
  const stopped = await finished(await submit(spec(marker)));
  assert.equal(stopped.status, 'completed');
  assert.deepEqual(stopped.agents.map((a) => a.round), [1]);
});

test('the chain shape users write runs as written (examples/agents/chain.json)', async () => {
  const spec = JSON.parse(readFileSync(path.join(examples, 'chain.json'), 'utf8'));
  const run = await finished(await submit(spec));
  assert.equal(run.status, 'completed', JSON.stringify(run));
  assert.deepEqual(run.agents.map((a) => `${a.name}:${a.round}`), ['writer:1', 'editor:1', 'writer:2', 'editor:2']);
  // Each agent sees the task and the previous agent's output.
  const expected = `Rewrite the part you are given so it reads better.\n\nTask: ${spec.task}\n\nPrevious output:\n${step(run, 'writer').output}`;
  assert.equal(step(run, 'editor').output, await complete(expected, 256));
});

test('a YAML spec (examples/agents/chain.yaml) runs like its JSON twin; bad YAML is a 400 naming the line', async () => {
  const post = async (body) => {
    const r = await fetch(`${server.url}/v1/pipelines`, { method: 'POST', headers: { 'Content-Type': 'application/yaml' }, body });
    return { status: r.status, json: await r.json() };
  };
  const yaml = await post(readFileSync(path.join(examples, 'chain.yaml'), 'utf8'));
  assert.equal(yaml.status, 200, JSON.stringify(yaml.json));
  const a = await finished(yaml.json.id);
  const b = await finished(await submit(JSON.parse(readFileSync(path.join(examples, 'chain.json'), 'utf8'))));
  assert.equal(a.status, 'completed');
  assert.deepEqual(a.agents.map((s) => s.output), b.agents.map((s) => s.output));
  const bad = await post('agents:\n  - name: a\n   prompt: [oops\n');
  assert.equal(bad.status, 400);
  assert.match(bad.json.error.message, /YAML.*line \d+/);
  const badField = await post('agents:\n  - name: a\n    prompt: x\n    retries: 9\n');
  assert.equal(badField.status, 400);
  assert.equal(badField.json.error.param, 'agents[0].retries');
});

test('the config shape users write runs as written (examples/agents/config.json)', async () => {
  const spec = JSON.parse(readFileSync(path.join(examples, 'config.json'), 'utf8'));
  const other = await startServer(`${spec.model}=${STORIES}`, ['-c', '1024']);
  try {
    const models = await (await fetch(`${other.url}/v1/models`)).json();
    assert.equal(models.data[0].id, 'assistant');
    const run = await finished(await submit({ ...spec, input: 'Plan a picnic in the park.' }, other.url), other.url);
    assert.equal(run.status, 'completed', JSON.stringify(run));
    assert.deepEqual(run.agents.map((a) => a.name), ['planner', 'executor']);
    assert.deepEqual(run.spec, spec, 'the run carries its spec as submitted (input apart)');
    for (const a of run.agents) assert.ok(a.tokens > 0 && a.tokens <= spec.max_tokens);
    // The planner's role prompt comes first, so the executor's prompt holds the plan: more prompt tokens.
    assert.ok(step(run, 'executor').prompt_tokens > step(run, 'planner').prompt_tokens);
  } finally {
    await other.stop();
  }
});

test('a failed attempt is retried and then succeeds; a third failure ends the run with the reason', async () => {
  const ok = await finished(await submit({
    task: 'Once upon a time', temperature: 0, max_tokens: 8,
    agents: [{ name: 'flaky', prompt: '{task}', retries: 1 }],
  }));
  assert.equal(ok.status, 'completed', JSON.stringify(ok));
  assert.equal(step(ok, 'flaky').attempts, 2);
  const logs = (await api(server.url, `/v1/pipelines/${ok.id}/logs`)).json.data;
  assert.ok(logs.some((l) => l.startsWith('[agent:flaky] RETRY 1/1')), logs.join('\n'));
  assert.ok(logs.some((l) => l.startsWith('[agent:flaky] DONE wall=')), logs.join('\n'));

  const bad = await finished(await submit({
    task: 'Once upon a time', temperature: 0, max_tokens: 8,
    agents: [{ name: 'first', prompt: '{task}' }, { name: 'broken', prompt: '{previous}', retries: 2 }, { name: 'never', prompt: '{previous}' }],
  }));
  assert.equal(bad.status, 'failed');
  assert.match(bad.error, /broken.*after 3 attempts.*injected failure/);
  assert.equal(step(bad, 'broken').status, 'failed');
  assert.equal(step(bad, 'broken').attempts, 3);
  assert.equal(step(bad, 'never').status, 'skipped');
  assert.ok(await metric(server.url, 'spool_agent_retries_total') >= 3);
});

test('cancel stops a running run and frees its KV blocks', async () => {
  const id = await submit({
    task: 'Once upon a time', temperature: 0.8, max_tokens: 900,
    agents: Array.from({ length: 6 }, (_, i) => ({ name: `s${i}`, prompt: `{task} ${i}`, stop: ['QQZZ'] })),
  });
  assert.ok(await waitFor(async () => (await metric(server.url, 'spool_kv_blocks_used')) > 0, { stepMs: 5 }));
  const r = await api(server.url, `/v1/pipelines/${id}/cancel`, {});
  assert.equal(r.status, 200);
  const run = await finished(id);
  assert.equal(run.status, 'cancelled');
  assert.ok(await waitFor(async () => (await metric(server.url, 'spool_kv_blocks_used')) === 0));
  assert.ok(run.agents.some((a) => a.status === 'skipped'), JSON.stringify(run.agents));
  // The step's engine request is counted as cancelled, under the pipeline source and in the total.
  const byPipeline = await metric(server.url, 'spool_requests_cancelled_total{source="pipeline"}');
  assert.ok(byPipeline >= 1, `pipeline requests cancelled: ${byPipeline}`);
  assert.ok(await metric(server.url, 'spool_requests_cancelled_total') >= byPipeline);
});

test('context policies: fail, truncate and summarize', async () => {
  const spec = (policy) => ({
    task: 'Once upon a time', temperature: 0, max_context: 48, context_policy: policy,
    agents: [{ name: 'long', prompt: '{task}', max_tokens: 40 }, { name: 'next', prompt: '{previous} The end', max_tokens: 12 }],
  });
  const failed = await finished(await submit(spec('fail')));
  assert.equal(failed.status, 'failed');
  assert.match(failed.error, /max_context 48/);
  assert.equal(step(failed, 'next').attempts, 1);  // not retried: it cannot fit
  for (const policy of ['truncate', 'summarize']) {
    const run = await finished(await submit(spec(policy)));
    assert.equal(run.status, 'completed', `${policy}: ${JSON.stringify(run)}`);
    assert.ok(step(run, 'next').prompt_tokens + 12 <= 48, JSON.stringify(step(run, 'next')));
    const logs = (await api(server.url, `/v1/pipelines/${run.id}/logs`)).json.data;
    assert.ok(logs.some((l) => l.startsWith(`[agent:next] CONTEXT ${policy} `)), logs.join('\n'));
  }
});

test('bad specs get a 400 naming the field, and nothing is stored', async () => {
  const before = (await api(server.url, '/v1/pipelines?limit=1000')).json.data.length;
  const cases = [
    [{ agents: [{ name: 'a', prompt: 'x', model: 'no-such-model' }] }, 'agents[0].model'],
    [{ agents: [{ name: 'a', prompt: '{agents.b.output}' }, { name: 'b', prompt: 'x' }] }, 'agents[0].prompt'],
    [{ agents: [{ name: 'a', prompt: '{agents.zz.output}' }] }, 'agents[0].prompt'],
    [{ agents: [{ name: 'a', prompt: 'x' }], stages: ['a', 'a'] }, 'stages[1]'],
    [{ agents: [{ name: 'a', prompt: 'x', retries: 5 }] }, 'agents[0].retries'],
    [{ agents: [{ name: 'a', temperature: 'hot', prompt: 'x' }] }, 'agents[0].temperature'],
    [{ agents: [{ name: 'a' }] }, 'agents[0].prompt'],
    [{ task: 'x' }, 'agents'],
  ];
  for (const [spec, param] of cases) {
    const r = await api(server.url, '/v1/pipelines', spec);
    assert.equal(r.status, 400, JSON.stringify(spec));
    assert.equal(r.json.error.param, param, JSON.stringify(r.json));
    assert.equal(r.json.error.code, 'invalid_spec');
  }
  assert.equal((await api(server.url, '/v1/pipelines?limit=1000')).json.data.length, before);
  assert.equal((await api(server.url, '/v1/pipelines/run_doesnotexist')).status, 404);
});

test('events stream as SSE and resume after Last-Event-ID; saved specs run by name', async () => {
  const put = await fetch(`${server.url}/v1/pipeline-specs/two-step`, {
    method: 'PUT', headers: { 'Content-Type': 'application/json' },
    body: JSON.stringify({ temperature: 0, max_tokens: 6, agents: [{ name: 'x', prompt: '{input}' }, { name: 'y', prompt: '{previous}' }] }),
  });
  assert.equal(put.status, 200);
  const id = await submit({ name: 'two-step', input: 'Once upon a time' });
  const res = await fetch(`${server.url}/v1/pipelines/${id}/events`);
  assert.equal(res.headers.get('content-type'), 'text/event-stream');
  const text = await res.text();
  const events = text.split('\n\n').filter((b) => b.startsWith('id: ')).map((b) => {
    const lines = b.split('\n');
    return { id: Number(lines[0].slice(4)), type: lines[1].slice(7), data: JSON.parse(lines[2].slice(6)) };
  });
  assert.deepEqual([...new Set(events.map((e) => e.type))], ['start', 'token', 'output', 'done']);
  assert.equal(events.at(-1).data.status, 'completed');
  const run = await finished(id);
  const tokens = events.filter((e) => e.type === 'token' && e.data.agent === 'x').map((e) => e.data.text).join('');
  assert.equal(tokens, step(run, 'x').output);
  const mid = events[Math.floor(events.length / 2)].id;
  const rest = await (await fetch(`${server.url}/v1/pipelines/${id}/events`, { headers: { 'Last-Event-ID': String(mid) } })).text();
  const restIds = [...rest.matchAll(/^id: (\d+)$/gm)].map((m) => Number(m[1]));
  assert.deepEqual(restIds, events.filter((e) => e.id > mid).map((e) => e.id));
  const bad = await api(server.url, '/v1/pipelines', { name: 'no-such-spec' });
  assert.equal(bad.status, 404);
  assert.equal(await metric(server.url, 'spool_pipeline_runs{status="failed"}') >= 1, true);
});

test('kill -9 in the middle of a run, restart on the same data dir: it resumes, finished steps are not run again', async () => {
  const dir = mkdtempSync(path.join(tmpdir(), 'spool-kill-'));
  try {
    let s = await startServer(STORIES, ['-c', '1024', '--data-dir', dir]);
    // A task of several KV blocks that every step's prompt starts with: the resumed steps read it from the disk tier.
    const task = 'Once upon a time there was a little girl named Lily. She loved to play in the park with her dog, ' +
      'and every day they ran to the big tree by the pond to look at the ducks.';
    const id = await submit({
      task, temperature: 0, max_tokens: 700,
      agents: Array.from({ length: 8 }, (_, i) => ({ name: `s${i}`, prompt: `{task} ${i}`, stop: ['QQZZ'] })),
    }, s.url);
    assert.ok(await waitFor(async () => {
      const run = (await api(s.url, `/v1/pipelines/${id}`)).json;
      return run.agents.filter((a) => a.status === 'done').length >= 2;
    }, { timeoutMs: 20000, stepMs: 5 }));
    s.proc.kill('SIGKILL');
    await new Promise((r) => s.proc.on('exit', r));
    s = await startServer(STORIES, ['-c', '1024', '--data-dir', dir]);
    try {
      // Listed at once after the restart, then it completes.
      const listed = (await api(s.url, '/v1/pipelines')).json.data.map((r) => r.id);
      assert.ok(listed.includes(id));
      const run = await finished(id, s.url, 60000);
      assert.equal(run.status, 'completed', JSON.stringify(run));
      assert.equal(run.agents.length, 8);
      const logs = (await api(s.url, `/v1/pipelines/${id}/logs`)).json.data;
      assert.ok(logs.some((l) => l.includes('RESUMED after restart')), logs.join('\n'));
      // Every step ran to completion exactly once: one DONE line each.
      for (let i = 0; i < 8; i++) {
        assert.equal(logs.filter((l) => l.startsWith(`[agent:s${i}] DONE`)).length, 1, logs.join('\n'));
      }
      // The shared task's KV came from disk after the restart, not from a recomputation.
      assert.ok(await metric(s.url, 'spool_kv_disk_hit_tokens_total') >= 32);
    } finally {
      await s.stop();
    }
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test('two models behind one server, one agent on each', async () => {
  const big = path.join(path.dirname(STORIES), 'llama-2-tiny-random.gguf');
  const s = await startServer(`small=${STORIES}`, ['-c', '512', '-m', `planner=${big}`]);
  try {
    const ids = (await (await fetch(`${s.url}/v1/models`)).json()).data.map((m) => m.id);
    assert.deepEqual(ids, ['small', 'planner']);
    const id = await submit({
      task: 'Once upon a time', temperature: 0, max_tokens: 8,
      agents: [{ name: 'plan', model: 'planner', prompt: '{task}' }, { name: 'exec', model: 'small', prompt: '{task} {previous}' }],
    }, s.url);
    const run = await finished(id, s.url);
    assert.equal(run.status, 'completed', JSON.stringify(run));
    // Each step's text is what its own model writes for that prompt alone.
    const alone = async (model, prompt) => (await api(s.url, '/v1/completions', { model, prompt, max_tokens: 8, temperature: 0 })).json.choices[0].text;
    const plan = step(run, 'plan').output;
    assert.equal(plan, await alone('planner', 'Once upon a time'));
    assert.notEqual(plan, await alone('small', 'Once upon a time'));
    assert.equal(step(run, 'exec').output, await alone('small', `Once upon a time ${plan}`));
    const bad = await api(s.url, '/v1/pipelines', { agents: [{ name: 'a', model: 'huge', prompt: 'x' }] });
    assert.equal(bad.status, 400);
    assert.equal(bad.json.error.param, 'agents[0].model');
  } finally {
    await s.stop();
  }
});
