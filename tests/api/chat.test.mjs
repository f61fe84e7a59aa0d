// /v1/chat/completions through the official openai client against a real
// `spool serve` on the qwen2-tiny fixture with a Qwen2 chat template: the
// template is applied as `spool run --chat` applies it (same greedy output),
// streamed chunks have OpenAI's chat chunk shape, logprobs, usage.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { startServer, runSpool, qwen2TinyWithTemplate } from './helpers.mjs';

let model, server, client;
before(async () => {
  model = qwen2TinyWithTemplate();
  server = await startServer(model.dir);
  client = server.client();
});
after(async () => {
  if (server) await server.stop();
  model?.remove();
});

test('greedy chat equals spool run --chat', async () => {
  for (const text of ['Hello', 'What is the capital of France?']) {
    const r = await client.chat.completions.create({
      model: server.modelId,
      messages: [{ role: 'user', content: text }],
      max_tokens: 16,
      temperature: 0,
    });
    const ref = await runSpool(['run', '-m', model.dir, '--chat', '-p', text, '-n', '16', '--temp', '0', '-t', '1']);
    assert.equal(ref.code, 0, ref.stderr);
    assert.equal(r.object, 'chat.completion');
    assert.equal(r.choices[0].message.role, 'assistant');
    assert.equal(r.choices[0].message.content, ref.stdout);
    assert.ok(['stop', 'length'].includes(r.choices[0].finish_reason));
    assert.ok(r.usage.prompt_tokens > 10, 'the template was not applied'); // the default system message alone is ~10 tokens
  }
});

test('a system message and multi-turn history go through the template', async () => {
  const messages = [
    { role: 'system', content: 'Be brief.' },
    { role: 'user', content: 'Hi' },
    { role: 'assistant', content: 'Hello!' },
    { role: 'user', content: [{ type: 'text', text: 'How are ' }, { type: 'text', text: 'you?' }] },
  ];
  const r = await client.chat.completions.create({ messages, max_tokens: 8, temperature: 0 });
  const tok = await (await fetch(`${server.url}/tokenize`, {
    method: 'POST', headers: { 'Content-Type': 'application/json' },
    body: JSON.stringify({
      content: '<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\nHello!<|im_end|>\n' +
        '<|im_start|>user\nHow are you?<|im_end|>\n<|im_start|>assistant\n',
    }),
  })).json();
  assert.equal(r.usage.prompt_tokens, tok.tokens.length);
});

test('streamed chat: role first, content deltas, finish, usage, [DONE]', async () => {
  const body = { messages: [{ role: 'user', content: 'Hello' }], max_tokens: 12, temperature: 0 };
  const whole = await client.chat.completions.create(body);
  const stream = await client.chat.completions.create({ ...body, stream: true, stream_options: { include_usage: true } });
  const chunks = [];
  for await (const c of stream) chunks.push(c);
  assert.equal(chunks[0].object, 'chat.completion.chunk');
  assert.equal(chunks[0].choices[0].delta.role, 'assistant');
  const content = chunks.flatMap((c) => c.choices.map((ch) => ch.delta.content ?? '')).join('');
  assert.equal(content, whole.choices[0].message.content);
  const finishes = chunks.flatMap((c) => c.choices.map((ch) => ch.finish_reason)).filter(Boolean);
  assert.deepEqual(finishes, [whole.choices[0].finish_reason]);
  const last = chunks.at(-1);
  assert.deepEqual(last.choices, []);
  assert.equal(last.usage.completion_tokens, whole.usage.completion_tokens);
  assert.equal(last.usage.prompt_tokens, whole.usage.prompt_tokens);
  // The raw stream ends with data: [DONE].
  const raw = await fetch(`${server.url}/v1/chat/completions`, {
    method: 'POST', headers: { 'Content-Type': 'application/json' },
    body: JSON.stringify({ ...body, stream: true }),
  });
  assert.match(raw.headers.get('content-type'), /text\/event-stream/);
  assert.match(await raw.text(), /data: \[DONE\]\n\n$/);
});

test('chat logprobs with top_logprobs', async () => {
  const r = await client.chat.completions.create({
    messages: [{ role: 'user', content: 'Hello' }], max_tokens: 5, temperature: 0, ignore_eos: true, logprobs: true, top_logprobs: 2,
  });
  const content = r.choices[0].logprobs.content;
  assert.equal(content.length, 5);
  assert.equal(content.map((c) => c.token).join(''), r.choices[0].message.content);
  for (const c of content) {
    assert.ok(c.logprob <= 0);
    assert.equal(c.top_logprobs.length, 2);
    assert.ok(c.top_logprobs[0].logprob >= c.top_logprobs[1].logprob);
    assert.ok(Math.abs(c.top_logprobs[0].logprob - c.logprob) < 1e-4); // greedy picks the top one
    assert.deepEqual(c.bytes, [...Buffer.from(c.token)]);
  }
});

test('max_completion_tokens and stop', async () => {
  const r = await client.chat.completions.create({
    messages: [{ role: 'user', content: 'Hello' }], max_completion_tokens: 6, temperature: 0, ignore_eos: true,
  });
  assert.equal(r.usage.completion_tokens, 6);
  assert.equal(r.choices[0].finish_reason, 'length');
  const text = r.choices[0].message.content;
  const stop = text.slice(3, 6);
  const s = await client.chat.completions.create({
    messages: [{ role: 'user', content: 'Hello' }], max_tokens: 6, temperature: 0, ignore_eos: true, stop,
  });
  assert.equal(s.choices[0].message.content, text.slice(0, text.indexOf(stop)));
  assert.equal(s.choices[0].finish_reason, 'stop');
});
