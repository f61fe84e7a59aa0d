// Speculative decoding through the server (stories260K): with --spec on, four
// concurrent greedy completions through the official openai client and a
// planner -> 4 executors -> summarizer pipeline give exactly the text of a
// --spec off server, while /metrics and /v1/stats show drafts verified and
// accepted (the pipeline's executors drafting from the planner's output);
// the default (auto) reports the governor's state. A server with a draft
// model (-md, here the model itself) gives the same text, every draft accepted.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { startServer, metric, waitFor, STORIES } from './helpers.mjs';

let off, on, auto, md;
before(async () => {
  [off, on, auto, md] = await Promise.all([
    startServer(STORIES, ['-c', '1024', '--parallel', '8', '--spec', 'off']),
    startServer(STORIES, ['-c', '1024', '--parallel', '8', '--spec', 'on', '--spec-max', '6']),
    startServer(STORIES, ['-c', '1024', '--parallel', '8']),
    startServer(STORIES, ['-c', '1024', '--parallel', '3', '--spec', 'on', '-md', STORIES]),
  ]);
});
after(async () => Promise.all([off, on, auto, md].map((s) => s && s.stop())));

const prompts = [
  'Once upon a time, there was a little girl named Lily. She loved to play in the park. Once upon a time, there was a',
  'Tom had a red ball. Tom liked his red ball. One day, Tom',
  'The sun was hot. The dog was hot. The cat',
  'Lily and Ben went to the park. They saw a big tree.',
];

async function completeAll(server) {
  const client = server.client();
  const res = await Promise.all(prompts.map((prompt) =>
    client.completions.create({ model: 'stories260K.gguf', prompt, max_tokens: 80, temperature: 0 })));
  return res.map((r) => r.choices[0].text);
}

test('greedy completions with drafts equal those without, and the counters show the drafts', async () => {
  const [a, b, c] = await Promise.all([completeAll(off), completeAll(on), completeAll(auto)]);
  assert.deepEqual(b, a);
  assert.deepEqual(c, a);
  assert.ok(a.every((t) => t.length > 20));
  const drafted = await metric(on.url, 'spool_spec_drafted_tokens_total');
  const accepted = await metric(on.url, 'spool_spec_accepted_tokens_total');
  assert.ok(drafted > 0 && accepted > 0 && accepted <= drafted, `drafted ${drafted}, accepted ${accepted}`);
  assert.equal(await metric(on.url, 'spool_spec_enabled'), 2);
  assert.equal(await metric(off.url, 'spool_spec_enabled'), 0);
  assert.equal(await metric(off.url, 'spool_spec_drafted_tokens_total'), 0);
  assert.equal(await metric(auto.url, 'spool_spec_enabled'), 1);
  const stats = await (await fetch(`${auto.url}/v1/stats`)).json();
  const spec = stats.models[0].engine.speculative;
  assert.equal(spec.mode, 'auto');
  assert.equal(spec.max_draft, 8);
  assert.ok(spec.acceptance_estimate > 0 && spec.acceptance_estimate < 1, JSON.stringify(spec));
  for (const k of ['drafted_tokens', 'accepted_tokens', 'verify_steps', 'declined_steps', 'verify_cost_ratio'])
    assert.equal(typeof spec[k], 'number', k);
});

test('a draft model drafts for concurrent completions without changing their text', async () => {
  const [a, b] = await Promise.all([completeAll(off), completeAll(md)]);
  assert.deepEqual(b, a);
  assert.equal(await metric(md.url, 'spool_spec_draft_model'), 1);
  assert.equal(await metric(off.url, 'spool_spec_draft_model'), 0);
  const drafted = await metric(md.url, 'spool_spec_model_drafted_tokens_total');
  const accepted = await metric(md.url, 'spool_spec_model_accepted_tokens_total');
  assert.ok(drafted > 100, `drafted ${drafted}`);
  assert.equal(accepted, drafted);  // the model as its own draft: every draft token is the model's own choice
  const spec = (await (await fetch(`${md.url}/v1/stats`)).json()).models[0].engine.speculative;
  assert.equal(spec.draft_model, true);
  assert.ok(spec.draft_seconds > 0, JSON.stringify(spec));
});

const pipeline = {
  name: 'plan-copy-summarize',
  task: 'Lily finds a lost dog in the park.',
  temperature: 0,
  max_tokens: 40,
  agents: [
    { name: 'planner', prompt: 'Task: {task}\nWrite the story plan.' },
    ...['one', 'two', 'three', 'four'].map((n) => ({
      name: n, prompt: `Plan:\n{agents.planner.output}\nCopy the plan, then write part ${n}.`,
    })),
    { name: 'summarizer', prompt: 'Results:\n{previous}\nWrite the final story.' },
  ],
  stages: ['planner', { parallel: ['one', 'two', 'three', 'four'] }, 'summarizer'],
};

async function runPipeline(server) {
  const r = await fetch(`${server.url}/v1/pipelines`, {
    method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify(pipeline),
  });
  assert.equal(r.status, 200);
  const { id } = await r.json();
  let run;
  assert.ok(await waitFor(async () => {
    run = await (await fetch(`${server.url}/v1/pipelines/${id}`)).json();
    return ['completed', 'failed', 'cancelled'].includes(run.status);
  }, { timeoutMs: 60000 }));
  assert.equal(run.status, 'completed', JSON.stringify(run));
  return Object.fromEntries(run.agents.map((a) => [a.name, a.output]));
}

test('a planner -> 4 executors -> summarizer pipeline gives the same outputs with drafts', async () => {
  const before = await metric(on.url, 'spool_spec_accepted_tokens_total');
  const [a, b] = await Promise.all([runPipeline(off), runPipeline(on)]);
  assert.deepEqual(b, a);
  assert.equal(Object.keys(a).length, 6);
  assert.ok(await metric(on.url, 'spool_spec_accepted_tokens_total') > before);
});
