// Bad requests against a real `spool serve`: malformed JSON, wrong types,
// unsupported values, unknown model and route, a prompt longer than the
// context, a body over the size limit, a full queue. Each gets the right
// status and an OpenAI error object, and the server keeps answering.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import { startServer, postRaw, assertErrorShape, STORIES } from './helpers.mjs';

let server, client;
before(async () => {
  server = await startServer(STORIES, ['-c', '128', '--max-body', '100000']);
  client = server.client();
});
after(async () => server && (await server.stop()));

async function stillServing() {
  const health = await fetch(`${server.url}/health`);
  assert.equal(health.status, 200);
  const r = await client.completions.create({ prompt: 'Once upon a time', max_tokens: 3 });
  assert.equal(r.usage.completion_tokens, 3);
}

test('malformed JSON is a 400 with a message', async () => {
  // 1e999 overflows a double: nlohmann throws out_of_range, not parse_error (was a 500; found by fuzzing).
  for (const body of ['{"prompt": "a",', 'not json', '', '[1, 2, 3]', '"a string"', '{"prompt": "a", "seed": 1e999}']) {
    const r = await postRaw(server.url, '/v1/completions', body);
    assert.equal(r.status, 400, body);
    assertErrorShape(assert, r.json, 'invalid_json');
  }
  await stillServing();
});

test('wrong types and values are 400s naming the parameter', async () => {
  const cases = [
    [{ prompt: 'a', max_tokens: 'ten' }, 'max_tokens'],
    [{ prompt: 'a', max_tokens: -3 }, 'max_tokens'],
    [{ prompt: 'a', temperature: 'hot' }, 'temperature'],
    [{ prompt: 'a', temperature: 5 }, 'temperature'],
    [{ prompt: 'a', top_p: 1.5 }, 'top_p'],
    [{ prompt: 'a', stop: 7 }, 'stop'],
    [{ prompt: 'a', n: 2 }, 'n'],
    [{ prompt: 'a', stream: 'yes' }, 'stream'],
    [{ prompt: 'a', logprobs: 50 }, 'logprobs'],
    [{ prompt: { text: 'a' } }, 'prompt'],
    [{ prompt: [1, 'b'] }, 'prompt'],
    [{ prompt: [100000] }, 'prompt'],
    [{ max_tokens: 3 }, 'prompt'],
  ];
  for (const [body, param] of cases) {
    await assert.rejects(client.completions.create(body), (e) => {
      assert.ok(e instanceof OpenAI.BadRequestError, `${JSON.stringify(body)}: ${e}`);
      assert.equal(e.status, 400);
      assert.equal(e.param, param, JSON.stringify(body));
      assert.ok(e.message.length > 0);
      return true;
    });
  }
  await stillServing();
});

test('chat on a model without a template, and bad messages', async () => {
  await assert.rejects(client.chat.completions.create({ messages: [{ role: 'user', content: 'hi' }] }),
    (e) => e.status === 400 && e.code === 'no_chat_template');
  const r = await postRaw(server.url, '/v1/chat/completions', JSON.stringify({ messages: 'hi' }));
  assert.equal(r.status, 400);
  assertErrorShape(assert, r.json, 'invalid_type');
  assert.equal(r.json.error.param, 'messages');
});

test('unknown model and unknown route are 404s', async () => {
  await assert.rejects(client.completions.create({ model: 'gpt-4', prompt: 'a' }),
    (e) => e instanceof OpenAI.NotFoundError && e.code === 'model_not_found' && e.param === 'model');
  const r = await fetch(`${server.url}/v1/nope`);
  assert.equal(r.status, 404);
  assertErrorShape(assert, await r.json(), 'not_found');
  await stillServing();
});

test('a prompt longer than the context is a 400', async () => {
  const prompt = 'Once upon a time there was a little girl. '.repeat(40); // far more than 128 tokens
  await assert.rejects(client.completions.create({ prompt, max_tokens: 4 }), (e) => {
    assert.equal(e.status, 400);
    assert.equal(e.code, 'context_length_exceeded');
    assert.match(e.message, /128/);
    return true;
  });
  await stillServing();
});

test('a body over --max-body is a 413', async () => {
  const r = await postRaw(server.url, '/v1/completions', JSON.stringify({ prompt: 'a'.repeat(200000) }));
  assert.equal(r.status, 413);
  assertErrorShape(assert, r.json, 'payload_too_large');
  await stillServing();
});

test('a full queue is a 503 with Retry-After', async () => {
  const busy = await startServer(STORIES, ['--parallel', '1', '--max-waiting', '1']);
  try {
    const c = busy.client();
    const results = await Promise.allSettled(
      Array.from({ length: 6 }, () => c.completions.create({ prompt: 'Once upon a time', max_tokens: 400, ignore_eos: true })),
    );
    const rejected = results.filter((r) => r.status === 'rejected');
    const fulfilled = results.filter((r) => r.status === 'fulfilled');
    assert.ok(fulfilled.length >= 1, 'nothing was served');
    assert.ok(rejected.length >= 1, 'nothing was refused');
    for (const { reason } of rejected) {
      assert.equal(reason.status, 503, String(reason));
      assert.equal(reason.code, 'queue_full');
      assert.equal(reason.headers.get('retry-after'), '1');
    }
    for (const { value } of fulfilled) assert.equal(value.usage.completion_tokens, 400);
  } finally {
    await busy.stop();
  }
});
