// Structured agent outputs through a real `spool serve` (stories260K): an
// agent with an output_schema writes JSON valid under it (checked by ajv),
// stored and returned parsed; later templates address its fields; a
// for_each stage runs one executor per element of its array, decoded
// together, each with its element in its prompt; a path missing at run time
// fails the step clearly; bad schemas and paths are 400s naming the field;
// kill -9 after the planner, restart: the parsed plan drives the rest.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import Ajv2020 from 'ajv/dist/2020.js';
import { startServer, waitFor, STORIES } from './helpers.mjs';

const here = path.dirname(fileURLToPath(import.meta.url));
const examples = path.resolve(here, '../../examples/agents');
const ajv = new Ajv2020({ strict: false });

let server;
before(async () => {
  server = await startServer(STORIES, ['-c', '1024', '--parallel', '8']);
});
after(async () => server && (await server.stop()));

async function api(url, route, body) {
  const res = await fetch(url + route, {
    method: body === undefined ? 'GET' : 'POST',
    headers: { 'Content-Type': 'application/json' },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  return { status: res.status, json: await res.json() };
}

async function submit(spec, url = server.url) {
  const r = await api(url, '/v1/pipelines', spec);
  assert.equal(r.status, 200, JSON.stringify(r.json));
  return r.json.id;
}

async function finished(id, url = server.url, timeoutMs = 60000) {
  let run;
  const ok = await waitFor(async () => {
    run = (await api(url, `/v1/pipelines/${id}`)).json;
    return ['completed', 'failed', 'cancelled'].includes(run.status);
  }, { timeoutMs, stepMs: 50 });
  assert.ok(ok, `run ${id} did not end: ${JSON.stringify(run)}`);
  return run;
}

const step = (run, name) => run.agents.find((a) => a.name === name);

// What the model writes for this prompt alone at temperature 0, optionally under a schema.
async function complete(prompt, maxTokens, schema, url = server.url) {
  const body = { prompt, max_tokens: maxTokens, temperature: 0 };
  if (schema) body.response_format = { type: 'json_schema', json_schema: { name: 'out', schema } };
  const r = await api(url, '/v1/completions', body);
  assert.equal(r.status, 200, JSON.stringify(r.json));
  return r.json.choices[0].text;
}

const short = (n) => ({ type: 'string', maxLength: n });
const PLAN = {
  type: 'object',
  properties: {
    goal: short(16),
    steps: {
      type: 'array', minItems: 2, maxItems: 3,
      items: { type: 'object', properties: { title: short(12), minutes: { type: 'integer', minimum: 1, maximum: 60 } }, required: ['title', 'minutes'] },
    },
  },
  required: ['goal', 'steps'],
};

test('a planner with an output_schema drives one executor per step, decoded together', async () => {
  const spec = {
    task: 'Once upon a time',
    max_tokens: 8,
    agents: [
      { name: 'planner', prompt: '{task} there was a plan', temperature: 1, seed: 11, max_tokens: 200, compact_json: true, output_schema: PLAN },
      { name: 'ex', prompt: 'Lily had to {item.title} for {item.minutes} minutes. Once upon a time', temperature: 0 },
      { name: 'sum', prompt: '{agents.ex.output[1]} and {agents.planner.output.steps[0].title}', temperature: 0 },
    ],
    stages: ['planner', { for_each: 'agents.planner.output.steps', agent: 'ex' }, 'sum'],
  };
  const run = await finished(await submit(spec));
  assert.equal(run.status, 'completed', JSON.stringify(run));
  const planner = step(run, 'planner');
  // The output is JSON valid under the schema, returned parsed too.
  const plan = JSON.parse(planner.output);
  assert.ok(ajv.validate(PLAN, plan), `${planner.output}: ${ajv.errorsText()}`);
  assert.deepEqual(planner.output_json, plan);
  // One executor step per element, its element rendered into its prompt.
  const execs = plan.steps.map((_, i) => step(run, `ex[${i}]`));
  assert.equal(run.agents.filter((a) => a.name.startsWith('ex')).length, plan.steps.length);
  for (let i = 0; i < plan.steps.length; i++) {
    assert.equal(execs[i].status, 'done');
    const want = await complete(`Lily had to ${plan.steps[i].title} for ${plan.steps[i].minutes} minutes. Once upon a time`, 8);
    assert.equal(execs[i].output, want, `ex[${i}]`);
    assert.equal(execs[i].output_json, undefined);  // no schema: text only
  }
  const lastStart = Math.max(...execs.map((s) => s.started_at));
  const firstEnd = Math.min(...execs.map((s) => s.finished_at));
  assert.ok(lastStart <= firstEnd, `executors ran one after another: ${JSON.stringify(execs)}`);
  // Fields, array elements and the executors' outputs as an array.
  assert.equal(step(run, 'sum').output, await complete(`${execs[1].output} and ${plan.steps[0].title}`, 8));
  const logs = (await api(server.url, `/v1/pipelines/${run.id}/logs`)).json.data;
  assert.ok(logs.some((l) => l.startsWith(`[agent:ex] FOR_EACH ${plan.steps.length} elements of agents.planner.output.steps`)), logs.join('\n'));
  // The output event carries the parsed value as well.
  const events = await (await fetch(`${server.url}/v1/pipelines/${run.id}/events`)).text();
  const out = events.split('\n\n').find((b) => b.includes('event: output') && b.includes('"agent":"planner"'));
  assert.deepEqual(JSON.parse(out.split('\ndata: ')[1]).output_json, plan);
});

test('structured executors: each output validates, and later prompts address their fields', async () => {
  const VERDICT = { type: 'object', properties: { ok: { type: 'boolean' }, note: short(10) }, required: ['ok', 'note'] };
  const LIST = { type: 'object', properties: { names: { type: 'array', items: { enum: ['Lily', 'Max', 'Tom'] }, minItems: 2, maxItems: 2 } }, required: ['names'] };
  const run = await finished(await submit({
    task: 'Once upon a time',
    temperature: 0,
    agents: [
      { name: 'who', prompt: '{task} there were two friends', max_tokens: 40, output_schema: LIST },
      { name: 'check', prompt: '{item} was happy.', max_tokens: 40, output_schema: VERDICT },
      { name: 'end', prompt: 'The note was {agents.check.output[1].note}', max_tokens: 6 },
    ],
    stages: ['who', { for_each: 'agents.who.output.names', agent: 'check' }, 'end'],
  }));
  assert.equal(run.status, 'completed', JSON.stringify(run));
  const names = step(run, 'who').output_json.names;
  assert.ok(ajv.validate(LIST, { names }));
  const checks = names.map((n, i) => step(run, `check[${i}]`));
  for (let i = 0; i < names.length; i++) {
    assert.ok(ajv.validate(VERDICT, checks[i].output_json), checks[i].output);
    // Constrained like a completion with the same schema.
    assert.equal(checks[i].output, await complete(`${names[i]} was happy.`, 40, VERDICT));
  }
  assert.equal(step(run, 'end').output, await complete(`The note was ${checks[1].output_json.note}`, 6));
});

test('a path missing at run time fails the step naming it; an empty array fans out to nothing', async () => {
  const EMPTY = { type: 'object', properties: { items: { type: 'array', items: short(5), maxItems: 0 } }, required: ['items'] };
  const bad = await finished(await submit({
    task: 'Once upon a time', temperature: 0, max_tokens: 20,
    agents: [
      { name: 'p', prompt: '{task}', output_schema: EMPTY },
      { name: 'q', prompt: 'First: {agents.p.output.items[0]}', retries: 2 },
    ],
  }));
  assert.equal(bad.status, 'failed');
  assert.equal(step(bad, 'q').attempts, 1);  // not retried: the path will not appear
  assert.match(bad.error, /\{agents\.p\.output\.items\[0\]\}: agents\.p\.output\.items has 0 elements, no \[0\]/);
  const empty = await finished(await submit({
    task: 'Once upon a time', temperature: 0, max_tokens: 6,
    agents: [
      { name: 'p', prompt: '{task}', max_tokens: 20, output_schema: EMPTY },
      { name: 'e', prompt: 'Do {item}' },
      { name: 'z', prompt: 'Results: {agents.e.output}.' },
    ],
    stages: ['p', { for_each: 'agents.p.output.items', agent: 'e' }, 'z'],
  }));
  assert.equal(empty.status, 'completed', JSON.stringify(empty));
  assert.equal(empty.agents.filter((a) => a.name.startsWith('e[')).length, 0);
  assert.equal(step(empty, 'z').output, await complete('Results: .', 6));
});

test('an output cut by max_tokens is a failed attempt, retried', async () => {
  const run = await finished(await submit({
    task: 'Once upon a time', temperature: 0,
    agents: [{ name: 'p', prompt: '{task}', max_tokens: 3, retries: 1, output_schema: PLAN }],
  }));
  assert.equal(run.status, 'failed');
  assert.equal(step(run, 'p').attempts, 2);
  assert.match(run.error, /reached max_tokens \(3\) before its JSON was complete/);
});

test('bad schemas, paths and for_each sources are 400s naming the field', async () => {
  const before = (await api(server.url, '/v1/pipelines?limit=1000')).json.data.length;
  const planner = { name: 'planner', prompt: '{task}', output_schema: PLAN };
  const cases = [
    [{ agents: [{ name: 'a', prompt: 'x', output_schema: { type: 'integr' } }] }, 'agents[0].output_schema', /integr/],
    [{ agents: [{ name: 'a', prompt: 'x', output_schema: { type: 'number', multipleOf: 2 } }] }, 'agents[0].output_schema', /multipleOf/],
    [{ agents: [{ name: 'a', prompt: 'x', output_schema: 'json' }] }, 'agents[0].output_schema', /an object/],
    [{ agents: [planner, { name: 'b', prompt: '{agents.planner.output.budget}' }] }, 'agents[1].prompt', /no property 'budget'/],
    [{ agents: [planner, { name: 'b', prompt: '{agents.planner.output.goal[0]}' }] }, 'agents[1].prompt', /not an array/],
    [{ agents: [{ name: 'a', prompt: 'x' }, { name: 'b', prompt: '{agents.a.output.x}' }] }, 'agents[1].prompt', /no output_schema/],
    [{ agents: [planner, { name: 'b', prompt: '{item}' }], stages: ['planner', { for_each: 'agents.planner.output.goal', agent: 'b' }] }, 'stages[1].for_each', /not an array/],
    [{ agents: [planner, { name: 'b', prompt: '{item.name}' }], stages: ['planner', { for_each: 'agents.planner.output.steps', agent: 'b' }] }, 'agents[1].prompt', /no property 'name'/],
    [{ agents: [planner, { name: 'b', prompt: '{item}' }], stages: ['planner', { for_each: 'steps', agent: 'b' }] }, 'stages[1].for_each', /placeholder/],
    [{ agents: [planner, { name: 'b', prompt: '{item}' }], stages: [{ for_each: 'agents.planner.output.steps', agent: 'b' }, 'planner'] }, 'stages[0].for_each', /does not run before/],
    [{ agents: [planner, { name: 'b', prompt: '{item}' }] }, 'agents[1].prompt', /for_each/],
  ];
  for (const [spec, param, message] of cases) {
    const r = await api(server.url, '/v1/pipelines', spec);
    assert.equal(r.status, 400, JSON.stringify(spec));
    assert.equal(r.json.error.param, param, JSON.stringify(r.json));
    assert.equal(r.json.error.code, 'invalid_spec');
    assert.match(r.json.error.message, message);
  }
  assert.equal((await api(server.url, '/v1/pipelines?limit=1000')).json.data.length, before);
});

test('examples/agents/structured.json runs as written', async () => {
  const spec = JSON.parse(readFileSync(path.join(examples, 'structured.json'), 'utf8'));
  const run = await finished(await submit(spec), server.url, 120000);
  assert.equal(run.status, 'completed', JSON.stringify(run));
  const plan = step(run, 'planner').output_json;
  assert.ok(ajv.validate(spec.agents[0].output_schema, plan), ajv.errorsText());
  for (let i = 0; i < plan.steps.length; i++)
    assert.ok(ajv.validate(spec.agents[1].output_schema, step(run, `executor[${i}]`).output_json));
});

test('kill -9 after the planner, restart: the stored plan is parsed again and drives the fan-out', async () => {
  const dir = mkdtempSync(path.join(tmpdir(), 'spool-schema-kill-'));
  const spec = {
    task: 'Once upon a time',
    agents: [
      { name: 'planner', prompt: '{task} there was a plan', temperature: 1, seed: 5, max_tokens: 200, compact_json: true, output_schema: PLAN },
      { name: 'ex', prompt: 'Lily had to {item.title}. Once upon a time', temperature: 0, max_tokens: 700, stop: ['QQZZ'] },
    ],
    stages: ['planner', { for_each: 'agents.planner.output.steps', agent: 'ex' }],
  };
  try {
    let s = await startServer(STORIES, ['-c', '1024', '--data-dir', dir]);
    const id = await submit(spec, s.url);
    let plan;
    assert.ok(await waitFor(async () => {
      const run = (await api(s.url, `/v1/pipelines/${id}`)).json;
      plan = step(run, 'planner')?.output_json;
      return step(run, 'planner')?.status === 'done';
    }, { timeoutMs: 20000, stepMs: 5 }));
    s.proc.kill('SIGKILL');
    await new Promise((r) => s.proc.on('exit', r));
    s = await startServer(STORIES, ['-c', '1024', '--data-dir', dir]);
    try {
      const run = await finished(id, s.url, 90000);
      assert.equal(run.status, 'completed', JSON.stringify(run));
      assert.deepEqual(step(run, 'planner').output_json, plan);
      const logs = (await api(s.url, `/v1/pipelines/${id}/logs`)).json.data;
      assert.equal(logs.filter((l) => l.startsWith('[agent:planner] DONE')).length, 1, logs.join('\n'));
      // Each element's prompt, rendered from the plan parsed again after the restart (long outputs decoded in a
      // batch may differ from one decoded alone, so the prompts are compared by their token counts).
      for (let i = 0; i < plan.steps.length; i++) {
        const alone = await api(s.url, '/v1/completions', { prompt: `Lily had to ${plan.steps[i].title}. Once upon a time`, max_tokens: 1 });
        const e = step(run, `ex[${i}]`);
        assert.equal(e.status, 'done');
        assert.equal(e.prompt_tokens, alone.json.usage.prompt_tokens, `ex[${i}]`);
      }
      assert.equal(run.agents.filter((a) => a.name.startsWith('ex[')).length, plan.steps.length);
    } finally {
      await s.stop();
    }
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
