// The Kimi hybrids (Kimi Linear from its HF fixture, Kimi K3 from its GGUF
// fixture) behind a real `spool serve`: four requests decoded together give
// the text each gives alone, and every recurrent state is freed after (/metrics);
// a K3 request cancelled mid-stream frees its state.
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import path from 'node:path';
import { startServer, metric, waitFor, SHARED } from './helpers.mjs';

const MODELS = {
  'kimi-linear': path.join(SHARED, 'fixtures/kimi-linear-tiny'),
  'kimi-k3': path.join(SHARED, 'fixtures/gguf/kimi-k3-tiny.f32.gguf'),
};
const prompts = ['Once upon a time', 'The quick brown fox jumps', 'hello world, this is a longer prompt with more words', '1 2 3'];
const servers = [];
after(async () => Promise.all(servers.map((s) => s.stop())));

for (const [name, model] of Object.entries(MODELS)) {
  test(`${name}: four sequences decoded together equal one at a time; states freed after`, async () => {
    const server = await startServer(model, ['-c', '4096', '--parallel', '4']);
    servers.push(server);
    const client = server.client();
    const ask = (prompt) => client.completions.create({ prompt, max_tokens: 16, temperature: 0, ignore_eos: true });
    const alone = [];
    for (const p of prompts) alone.push((await ask(p)).choices[0].text);
    const together = await Promise.all(prompts.map(ask));
    together.forEach((r, i) => {
      assert.equal(r.choices[0].text, alone[i], `prompt ${i}`);
      assert.equal(r.usage.completion_tokens, 16);
    });
    const idle = await waitFor(async () => (await metric(server.url, 'spool_recurrent_sequences')) === 0);
    assert.ok(idle, 'recurrent states still held after every request completed');
    assert.equal(await metric(server.url, 'spool_recurrent_state_bytes'), 0);
  });
}

test('kimi-k3: a request cancelled mid-stream frees its recurrent state', async () => {
  const server = await startServer(MODELS['kimi-k3'], ['-c', '4096', '--parallel', '4']);
  servers.push(server);
  const client = server.client();
  const controller = new AbortController();
  const stream = await client.completions.create(
    { prompt: 'Once upon a time', max_tokens: 4000, temperature: 0, ignore_eos: true, stream: true },
    { signal: controller.signal },
  );
  let chunks = 0;
  let held = 0;
  let sequences = 0;
  for await (const _ of stream) {
    if (++chunks === 2) {
      held = await metric(server.url, 'spool_recurrent_state_bytes');
      sequences = await metric(server.url, 'spool_recurrent_sequences');
    }
    if (chunks === 3) {
      controller.abort();
      break;
    }
  }
  assert.ok(held > 0, 'no recurrent state while the request ran');
  assert.equal(sequences, 1);
  const idle = await waitFor(async () =>
    (await metric(server.url, 'spool_requests_running')) === 0 && (await metric(server.url, 'spool_recurrent_sequences')) === 0);
  assert.ok(idle, 'the cancelled request still holds its recurrent state');
  assert.equal(await metric(server.url, 'spool_recurrent_state_bytes'), 0);
  const r = await client.completions.create({ prompt: 'still serving', max_tokens: 8, temperature: 0, ignore_eos: true });
  assert.equal(r.usage.completion_tokens, 8);
});
