// A hybrid linear-attention model (Qwen3-Next, tiny fixture) behind a real
// `spool serve`: four requests decoded together give the text each gives
// alone; each running request holds one recurrent state, freed when it
// completes and when it is cancelled (/metrics); the prefix cache is off for it.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import path from 'node:path';
import { startServer, metric, waitFor, SHARED } from './helpers.mjs';

const MODEL = path.join(SHARED, 'fixtures/qwen3next-tiny');
let server, client;
before(async () => {
  server = await startServer(MODEL, ['-c', '4096', '--parallel', '4']);
  client = server.client();
});
after(async () => server && (await server.stop()));

const prompts = ['Once upon a time', 'The quick brown fox jumps', 'hello world, this is a longer prompt with more words', '1 2 3'];
const ask = (prompt) => client.completions.create({ prompt, max_tokens: 16, temperature: 0, ignore_eos: true });

test('four hybrid sequences decoded together equal one at a time; states freed after', async () => {
  assert.equal(await metric(server.url, 'spool_prefix_cache_enabled'), 0);
  const alone = [];
  for (const p of prompts) alone.push((await ask(p)).choices[0].text);
  const together = await Promise.all(prompts.map(ask));
  together.forEach((r, i) => {
    assert.equal(r.choices[0].text, alone[i], `prompt ${i}`);
    assert.equal(r.usage.completion_tokens, 16);
    assert.equal(r.usage.prompt_tokens_details?.cached_tokens ?? 0, 0);
  });
  const idle = await waitFor(async () => (await metric(server.url, 'spool_recurrent_sequences')) === 0);
  assert.ok(idle, 'recurrent states still held after every request completed');
  assert.equal(await metric(server.url, 'spool_recurrent_state_bytes'), 0);
});

test('a cancelled hybrid request frees its recurrent state', async () => {
  const controller = new AbortController();
  const stream = await client.completions.create(
    { prompt: 'Once upon a time', max_tokens: 4000, temperature: 0, ignore_eos: true, stream: true },
    { signal: controller.signal },
  );
  let chunks = 0;
  let held = 0;
  for await (const _ of stream) {
    if (++chunks === 2) held = await metric(server.url, 'spool_recurrent_state_bytes');
    if (chunks === 3) {
      controller.abort();
      break;
    }
  }
  assert.ok(held > 0, 'no recurrent state while the request ran');
  const idle = await waitFor(async () =>
    (await metric(server.url, 'spool_requests_running')) === 0 && (await metric(server.url, 'spool_recurrent_sequences')) === 0);
  assert.ok(idle, 'the cancelled request still holds its recurrent state');
  assert.equal(await metric(server.url, 'spool_recurrent_state_bytes'), 0);
  const r = await ask('still serving');
  assert.equal(r.usage.completion_tokens, 16);
});
