// /v1/completions through the official openai client against a real
// `spool serve` on stories260K: streamed and not, stop strings, greedy output
// equal to `spool run`, 8 concurrent greedy requests equal to the same 8 one at
// a time, cancel mid-stream freeing the KV blocks, /tokenize, /detokenize,
// /v1/models and /metrics.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { startServer, runSpool, metric, waitFor, STORIES } from './helpers.mjs';

let server, client;
before(async () => {
  server = await startServer(STORIES, ['--parallel', '8']);
  client = server.client();
});
after(async () => server && (await server.stop()));

const prompts = [
  'Once upon a time',
  'The little dog',
  'Lily wanted to',
  'One day, a boy named Tim',
  'The sun was shining and',
  'Mom said',
  'There was a big tree',
  'The cat and the bird',
];

test('models lists the model file name', async () => {
  const models = await client.models.list();
  assert.deepEqual(models.data.map((m) => m.id), ['stories260K.gguf']);
  assert.equal(server.modelId, 'stories260K.gguf');
});

test('completion, not streamed', async () => {
  const r = await client.completions.create({ model: 'stories260K.gguf', prompt: 'Once upon a time', max_tokens: 12, temperature: 0 });
  assert.equal(r.object, 'text_completion');
  assert.equal(r.model, 'stories260K.gguf');
  assert.equal(r.choices.length, 1);
  assert.ok(r.choices[0].text.length > 0);
  assert.equal(r.choices[0].finish_reason, 'length');
  assert.equal(r.usage.completion_tokens, 12);
  assert.equal(r.usage.prompt_tokens, 5); // BOS + 4 tokens, as /tokenize says below
  assert.equal(r.usage.total_tokens, 17);
  assert.equal(typeof r.usage.prompt_tokens_details.cached_tokens, 'number');
});

test('completion, streamed, with usage', async () => {
  const full = await client.completions.create({ prompt: 'The little dog', max_tokens: 16, temperature: 0 });
  const stream = await client.completions.create({
    prompt: 'The little dog', max_tokens: 16, temperature: 0, stream: true, stream_options: { include_usage: true },
  });
  let text = '';
  let finish = null;
  let usage = null;
  let chunks = 0;
  for await (const chunk of stream) {
    chunks++;
    if (chunk.usage) usage = chunk.usage;
    for (const c of chunk.choices) {
      text += c.text;
      if (c.finish_reason) finish = c.finish_reason;
    }
  }
  assert.ok(chunks >= 3, `only ${chunks} chunks`);
  assert.equal(text, full.choices[0].text);
  assert.equal(finish, 'length');
  assert.equal(usage.completion_tokens, 16);
  assert.equal(usage.prompt_tokens, full.usage.prompt_tokens);
});

test('greedy output equals spool run', async () => {
  for (const prompt of prompts.slice(0, 3)) {
    const r = await client.completions.create({ prompt, max_tokens: 40, temperature: 0 });
    const ref = await runSpool(['run', '-m', STORIES, '-p', prompt, '-n', '40', '--temp', '0', '-t', '1']);
    assert.equal(ref.code, 0, ref.stderr);
    assert.equal(r.choices[0].text, ref.stdout, `prompt ${JSON.stringify(prompt)}`);
  }
});

test('stop strings end the text before the stop string', async () => {
  const free = await client.completions.create({ prompt: 'Once upon a time', max_tokens: 40, temperature: 0 });
  const text = free.choices[0].text; // ", there was a little girl named Lily. ..."
  const cut = text.indexOf('little');
  assert.ok(cut > 0, text);
  const r = await client.completions.create({ prompt: 'Once upon a time', max_tokens: 40, temperature: 0, stop: ['little', 'zzz'] });
  assert.equal(r.choices[0].text, text.slice(0, cut));
  assert.equal(r.choices[0].finish_reason, 'stop');
  const s = await client.completions.create({ prompt: 'Once upon a time', max_tokens: 40, temperature: 0, stop: 'little', stream: true });
  let streamed = '';
  for await (const chunk of s) streamed += chunk.choices.map((c) => c.text).join('');
  assert.equal(streamed, text.slice(0, cut));
});

test('8 concurrent greedy requests equal the same 8 one at a time', async () => {
  const ask = (prompt) => client.completions.create({ prompt, max_tokens: 32, temperature: 0 });
  const sequential = [];
  for (const p of prompts) sequential.push((await ask(p)).choices[0].text);
  const concurrent = await Promise.all(prompts.map(ask));
  assert.deepEqual(concurrent.map((r) => r.choices[0].text), sequential);
  // And streamed, all at once.
  const streamed = await Promise.all(
    prompts.map(async (prompt) => {
      let text = '';
      for await (const chunk of await client.completions.create({ prompt, max_tokens: 32, temperature: 0, stream: true }))
        text += chunk.choices.map((c) => c.text).join('');
      return text;
    }),
  );
  assert.deepEqual(streamed, sequential);
});

test('seeded sampling is reproducible', async () => {
  const ask = () => client.completions.create({ prompt: 'Once upon a time', max_tokens: 24, temperature: 1, top_p: 0.9, seed: 1234 });
  const a = await ask();
  const b = await ask();
  assert.equal(a.choices[0].text, b.choices[0].text);
});

test('logprobs', async () => {
  const r = await client.completions.create({ prompt: 'Once upon a time', max_tokens: 4, temperature: 0, logprobs: 3 });
  const lp = r.choices[0].logprobs;
  assert.equal(lp.tokens.length, 4);
  assert.equal(lp.tokens.join(''), r.choices[0].text);
  for (let i = 0; i < 4; i++) {
    assert.ok(lp.token_logprobs[i] <= 0);
    const alts = Object.entries(lp.top_logprobs[i]);
    assert.ok(alts.length >= 1 && alts.length <= 3);
    // Greedy: the chosen token is the most likely one.
    assert.ok(Math.abs(Math.max(...alts.map(([, v]) => v)) - lp.token_logprobs[i]) < 1e-4);
  }
});

test('cancel mid-stream frees the request and its KV blocks', async () => {
  const before = await metric(server.url, 'spool_generated_tokens_total');
  const controller = new AbortController();
  const stream = await client.completions.create(
    { prompt: 'Once upon a time', max_tokens: 1500, temperature: 0, ignore_eos: true, stream: true },
    { signal: controller.signal },
  );
  let chunks = 0;
  // The client ends the iteration quietly when aborted.
  for await (const _ of stream) {
    if (++chunks === 3) {
      controller.abort();
      break;
    }
  }
  assert.equal(chunks, 3);
  const idle = await waitFor(async () =>
    (await metric(server.url, 'spool_requests_running')) === 0 && (await metric(server.url, 'spool_kv_blocks_used')) === 0);
  assert.ok(idle, 'the request still holds KV blocks');
  const generated = (await metric(server.url, 'spool_generated_tokens_total')) - before;
  assert.ok(generated < 1500, `the cancelled request generated all ${generated} tokens`);
  // Still serving.
  const r = await client.completions.create({ prompt: 'Mom said', max_tokens: 4 });
  assert.equal(r.usage.completion_tokens, 4);
});

test('tokenize and detokenize', async () => {
  const t = await fetch(`${server.url}/tokenize`, { method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify({ content: 'Once upon a time' }) });
  assert.equal(t.status, 200);
  const { tokens } = await t.json();
  assert.equal(tokens.length, 4);
  assert.ok(tokens.every(Number.isInteger));
  const d = await fetch(`${server.url}/detokenize`, { method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify({ tokens }) });
  assert.equal((await d.json()).content.trim(), 'Once upon a time');
  // Token-id prompts give the same answer as the text.
  const withBos = [1, ...tokens];
  const a = await client.completions.create({ prompt: withBos, max_tokens: 8, temperature: 0 });
  const b = await client.completions.create({ prompt: 'Once upon a time', max_tokens: 8, temperature: 0 });
  assert.equal(a.choices[0].text, b.choices[0].text);
});

test('metrics: Prometheus text with histograms, no blocks held when idle', async () => {
  const res = await fetch(`${server.url}/metrics`);
  assert.equal(res.status, 200);
  assert.match(res.headers.get('content-type'), /text\/plain/);
  const text = await res.text();
  for (const name of ['spool_requests_running', 'spool_requests_waiting', 'spool_prompt_tokens_total',
    'spool_generated_tokens_total', 'spool_kv_blocks_used', 'spool_kv_blocks_total', 'spool_prefix_cache_hit_tokens_total']) {
    assert.match(text, new RegExp(`^# TYPE ${name} (gauge|counter)$`, 'm'), name);
  }
  assert.match(text, /^spool_time_to_first_token_seconds_bucket\{le="\+Inf"\} [1-9]\d*$/m);
  assert.match(text, /^spool_inter_token_latency_seconds_count [1-9]\d*$/m);
  assert.equal(await metric(server.url, 'spool_kv_blocks_used'), 0);
  assert.ok((await metric(server.url, 'spool_kv_blocks_total')) > 0);
});
