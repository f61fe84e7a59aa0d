// /v1/responses (OpenAI's Responses API) through the official openai client
// against a real `spool serve` on qwen2-tiny with a chat template that renders
// tools: a three-turn conversation through previous_response_id whose
// follow-ups reuse the earlier turns' KV (cached_tokens) and whose text equals
// sending the whole conversation as items; streamed events in OpenAI's order
// (client.responses.create with stream: true, and client.responses.stream);
// a tool-call round trip; text.format json_schema; max_output_tokens ->
// incomplete; store: false; retrieve, delete, input_items, background + cancel;
// error objects; --request-timeout; --max-storage.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { toFile } from 'openai';
import Ajv2020 from 'ajv/dist/2020.js';
import { startServer, qwen2TinyWithTemplate, assertErrorShape } from './helpers.mjs';

const here = path.dirname(fileURLToPath(import.meta.url));
const ajv = new Ajv2020({ strict: false });
const BLOCK = 16;  // KV positions per block (the engine's default)

const WEATHER = {
  type: 'function', name: 'get_weather', description: 'Weather for a city',
  parameters: {
    type: 'object', properties: { city: { type: 'string', maxLength: 12 }, unit: { enum: ['celsius', 'fahrenheit'] } },
    required: ['city', 'unit'], additionalProperties: false,
  },
};

let model, server, client;
before(async () => {
  model = qwen2TinyWithTemplate(path.join(here, 'fixtures/tools_chat_template.jinja'));
  server = await startServer(model.dir, ['-c', '1024']);
  client = server.client();
});
after(async () => {
  if (server) await server.stop();
  model?.remove();
});

const turn = (input, extra = {}) => ({ input, max_output_tokens: 24, temperature: 0, ...extra });

test('a three-turn conversation continues its tokens: cached_tokens, and the text of the whole conversation', async () => {
  const r1 = await client.responses.create(turn('Hello, who are you?'));
  assert.match(r1.id, /^resp_/);
  assert.equal(r1.object, 'response');
  assert.equal(r1.output[0].type, 'message');
  assert.equal(r1.output[0].role, 'assistant');
  assert.equal(r1.output[0].content[0].type, 'output_text');
  assert.deepEqual(r1.output[0].content[0].annotations, []);
  assert.equal(typeof r1.output_text, 'string');  // the SDK's convenience, from output
  assert.equal(r1.output_text, r1.output[0].content[0].text);
  const r2 = await client.responses.create(turn('Tell me more.', { previous_response_id: r1.id }));
  const r3 = await client.responses.create(turn('And then?', { previous_response_id: r2.id }));
  assert.equal(r3.previous_response_id, r2.id);
  for (const [prev, next] of [[r1, r2], [r2, r3]]) {
    const before = prev.usage.input_tokens + prev.usage.output_tokens;
    assert.ok(next.usage.input_tokens > before, `${next.usage.input_tokens} <= ${before}`);
    assert.ok(next.usage.input_tokens_details.cached_tokens >= before - BLOCK,
              `cached ${next.usage.input_tokens_details.cached_tokens} of a conversation of ${before} tokens`);
  }
  assert.equal(r3.usage.output_tokens_details.reasoning_tokens, 0);
  assert.equal(r3.usage.total_tokens, r3.usage.input_tokens + r3.usage.output_tokens);

  // The same conversation sent whole (the earlier outputs as items): the same prompt, the same text.
  const whole = await client.responses.create(turn([
    { role: 'user', content: 'Hello, who are you?' }, ...r1.output,
    { role: 'user', content: 'Tell me more.' }, ...r2.output,
    { role: 'user', content: [{ type: 'input_text', text: 'And then?' }] },
  ], { store: false }));
  assert.equal(whole.usage.input_tokens, r3.usage.input_tokens);
  assert.equal(whole.output_text, r3.output_text);
  assert.ok(r3.output_text.length > 0);

  // input_items: every item this turn saw, newest first unless asked.
  const asc = [];
  for await (const item of client.responses.inputItems.list(r3.id, { order: 'asc', limit: 2 })) asc.push(item);
  assert.deepEqual(asc.map((i) => i.role), ['user', 'assistant', 'user', 'assistant', 'user']);
  assert.equal(asc[1].id, r1.output[0].id);
  assert.equal(asc[4].content[0].type, 'input_text');
  assert.equal(asc[4].content[0].text, 'And then?');
  const desc = await client.responses.inputItems.list(r3.id);
  assert.equal(desc.data[0].id, asc[4].id);
  assert.equal(desc.data.length, 5);
  assert.equal(desc.has_more, false);
});

// Sampled (spool's seed extension): each turn draws from logits that any
// difference of prompt tokens would change, so equal text means equal prompts.
test('sampled with a seed: a follow-up and the whole conversation as items draw the same text', async () => {
  const sampled = (input, seed, extra = {}) => ({ input, max_output_tokens: 24, temperature: 1, seed, ...extra });
  const r1 = await client.responses.create(sampled('Hello, who are you?', 1));
  const r2 = await client.responses.create(sampled('Tell me more.', 2, { previous_response_id: r1.id }));
  const r3 = await client.responses.create(sampled('And then?', 3, { previous_response_id: r2.id }));
  const before = r2.usage.input_tokens + r2.usage.output_tokens;
  assert.ok(r3.usage.input_tokens_details.cached_tokens >= before - BLOCK,
            `cached ${r3.usage.input_tokens_details.cached_tokens} of ${before}`);
  const whole = await client.responses.create(sampled([
    { role: 'user', content: 'Hello, who are you?' }, ...r1.output,
    { role: 'user', content: 'Tell me more.' }, ...r2.output, { role: 'user', content: 'And then?' },
  ], 3, { store: false }));
  assert.equal(whole.usage.input_tokens, r3.usage.input_tokens);
  assert.equal(whole.output_text, r3.output_text);
  assert.notEqual(r3.output_text, r2.output_text);
});

test('instructions are not carried over to a follow-up', async () => {
  const r1 = await client.responses.create(turn('Hi', { instructions: 'Answer in French.' }));
  assert.equal(r1.instructions, 'Answer in French.');
  const r2 = await client.responses.create(turn('Again', { previous_response_id: r1.id }));
  assert.equal(r2.instructions, null);
  assert.ok(r2.usage.input_tokens > r1.usage.input_tokens);
});

test('streamed events arrive in OpenAI\'s order and add up to the response', async () => {
  const body = turn('Hello', { max_output_tokens: 12 });
  const ref = await client.responses.create(body);
  const stream = await client.responses.create({ ...body, stream: true });
  const events = [];
  for await (const ev of stream) events.push(ev);
  events.forEach((ev, i) => assert.equal(ev.sequence_number, i));
  const types = events.map((e) => e.type);
  const deltas = types.filter((t) => t === 'response.output_text.delta').length;
  assert.ok(deltas >= 2, types.join(' '));
  assert.deepEqual(types, [
    'response.created', 'response.in_progress', 'response.output_item.added', 'response.content_part.added',
    ...Array(deltas).fill('response.output_text.delta'),
    'response.output_text.done', 'response.content_part.done', 'response.output_item.done',
    ref.status === 'completed' ? 'response.completed' : 'response.incomplete',
  ]);
  assert.equal(events[0].response.status, 'in_progress');
  const text = events.filter((e) => e.type === 'response.output_text.delta').map((e) => e.delta).join('');
  const final = events.at(-1).response;
  assert.equal(text, ref.output_text);
  assert.equal(final.output[0].content[0].text, text);
  assert.equal(final.output[0].id, events[2].item.id);
  assert.equal(events.at(-4).text, text);
  assert.equal(final.usage.output_tokens, ref.usage.output_tokens);
  // Stored: retrievable as it was streamed.
  assert.deepEqual((await client.responses.retrieve(final.id)).output, final.output);
});

test('a response the model ends is response.completed, through client.responses.stream too', async () => {
  const body = {
    input: 'Is it raining?', temperature: 0, max_output_tokens: 200,
    text: { format: { type: 'json_schema', name: 'answer', strict: true, schema: {
      type: 'object', properties: { raining: { type: 'boolean' } }, required: ['raining'], additionalProperties: false,
    } } },
  };
  const stream = await client.responses.create({ ...body, stream: true });
  const types = [];
  for await (const ev of stream) types.push(ev.type);
  assert.equal(types.at(-1), 'response.completed');
  assert.equal(types.filter((t) => t === 'response.completed').length, 1);

  const helper = client.responses.stream(body);
  const seen = [];
  helper.on('response.output_text.delta', (e) => seen.push(e.delta));
  const final = await helper.finalResponse();
  assert.equal(final.status, 'completed');
  assert.equal(seen.join(''), final.output_text);
  assert.equal(typeof JSON.parse(final.output_text).raining, 'boolean');
});

test('text.format json_schema: the output parses and validates', async () => {
  const schema = {
    type: 'object',
    properties: { name: { type: 'string', maxLength: 10 }, age: { type: 'integer', minimum: 0, maximum: 120 },
                  tags: { type: 'array', items: { enum: ['a', 'b'] }, maxItems: 3 } },
    required: ['name', 'age', 'tags'], additionalProperties: false,
  };
  const validate = ajv.compile(schema);
  for (let seed = 0; seed < 3; ++seed) {
    const r = await client.responses.create({
      input: 'Describe a person.', temperature: 1, max_output_tokens: 300,
      text: { format: { type: 'json_schema', name: 'person', schema, strict: true } },
    });
    assert.equal(r.status, 'completed', JSON.stringify(r.output));
    assert.equal(r.text.format.type, 'json_schema');
    const parsed = JSON.parse(r.output_text);
    assert.ok(validate(parsed), `${r.output_text}: ${ajv.errorsText(validate.errors)}`);
  }
});

test('a tool call round trip: function_call out, function_call_output in, a text answer', async () => {
  const validate = ajv.compile(WEATHER.parameters);
  const r1 = await client.responses.create({
    input: 'What is the weather in Paris?', tools: [WEATHER], tool_choice: 'required', temperature: 0,
    max_output_tokens: 300, parallel_tool_calls: false,
  });
  assert.equal(r1.status, 'completed', JSON.stringify(r1.output));
  assert.equal(r1.tools[0].name, 'get_weather');  // echoed flat
  const call = r1.output[0];
  assert.equal(call.type, 'function_call');
  assert.equal(call.name, 'get_weather');
  assert.match(call.call_id, /^call_/);
  assert.match(call.id, /^fc_/);
  assert.ok(validate(JSON.parse(call.arguments)), call.arguments);

  const r2 = await client.responses.create({
    previous_response_id: r1.id, tools: [WEATHER], temperature: 0, max_output_tokens: 16, tool_choice: 'none',
    input: [{ type: 'function_call_output', call_id: call.call_id, output: '{"temperature": 21}' }],
  });
  assert.equal(r2.output[0].type, 'message');
  assert.ok(r2.output_text.length > 0);
  assert.ok(r2.usage.input_tokens > r1.usage.input_tokens + r1.usage.output_tokens);
  // The follow-up continues the first turn's tokens (the call as the model wrote it), so their KV is reused:
  // all but the last partial block (16 positions) of them.
  const before = r1.usage.input_tokens + r1.usage.output_tokens;
  assert.ok(r2.usage.input_tokens_details.cached_tokens >= before - 16,
    `${r2.usage.input_tokens_details.cached_tokens} cached of ${before}`);
  const items = await client.responses.inputItems.list(r2.id, { order: 'asc' });
  assert.deepEqual(items.data.map((i) => i.type), ['message', 'function_call', 'function_call_output']);
  assert.equal(items.data[1].call_id, call.call_id);

  // The same call streamed: its arguments in deltas, then done, with the ids of the final item.
  const stream = await client.responses.create({
    input: 'What is the weather in Paris?', tools: [WEATHER], tool_choice: 'required', temperature: 0,
    max_output_tokens: 300, parallel_tool_calls: false, stream: true,
  });
  const events = [];
  for await (const ev of stream) events.push(ev);
  const args = events.filter((e) => e.type === 'response.function_call_arguments.delta');
  assert.ok(args.length >= 2);
  const done = events.find((e) => e.type === 'response.function_call_arguments.done');
  assert.equal(args.map((e) => e.delta).join(''), done.arguments);
  assert.deepEqual(JSON.parse(done.arguments), JSON.parse(call.arguments));
  const final = events.at(-1);
  assert.equal(final.type, 'response.completed');
  assert.equal(final.response.output[0].id, done.item_id);
  assert.equal(events.find((e) => e.type === 'response.output_item.added').item.call_id, final.response.output[0].call_id);
});

test('max_output_tokens cuts the answer: status incomplete with its reason', async () => {
  const r = await client.responses.create({ input: 'Tell me a long story.', max_output_tokens: 5, temperature: 0 });
  assert.equal(r.status, 'incomplete');
  assert.deepEqual(r.incomplete_details, { reason: 'max_output_tokens' });
  assert.equal(r.usage.output_tokens, 5);
  assert.equal(r.max_output_tokens, 5);
  assert.equal(r.output[0].status, 'incomplete');
});

test('store: false is not kept; retrieve, delete; errors name the field or the id', async () => {
  const gone = await client.responses.create({ input: 'Hi', max_output_tokens: 4, store: false });
  assert.equal(gone.store, false);
  await assert.rejects(client.responses.retrieve(gone.id), (e) => e.status === 404);
  await assert.rejects(client.responses.create({ input: 'Hi', previous_response_id: gone.id }),
                       (e) => e.status === 404 && e.param === 'previous_response_id');

  const kept = await client.responses.create({ input: 'Hi', max_output_tokens: 4, metadata: { user: 'u1' } });
  const got = await client.responses.retrieve(kept.id);
  assert.deepEqual(got, kept);
  assert.deepEqual(got.metadata, { user: 'u1' });
  const del = await fetch(`${server.url}/v1/responses/${kept.id}`, { method: 'DELETE' });
  assert.equal(del.status, 200);
  assert.deepEqual(await del.json(), { id: kept.id, object: 'response', deleted: true });
  await assert.rejects(client.responses.retrieve(kept.id), (e) => e.status === 404);
  await assert.rejects(client.responses.delete(kept.id), (e) => e.status === 404);

  const unknown = await fetch(`${server.url}/v1/responses/resp_nope`);
  assert.equal(unknown.status, 404);
  const j = await unknown.json();
  assertErrorShape(assert, j, 'not_found');
  assert.match(j.error.message, /resp_nope/);

  for (const [body, param] of [
    [{ input: 'x', tools: [{ type: 'web_search' }] }, 'tools[0].type'],
    [{ input: 'x', text: { format: { type: 'json_schema', name: 'n', schema: { type: 'object', properties: 3 } } } }, 'text.format'],
    [{ input: [{ role: 'user', content: [{ type: 'input_image', image_url: 'http://x' }] }] }, 'input[0].content[0].type'],
    [{ input: 'x', max_output_tokens: -1 }, 'max_output_tokens'],
    [{ input: 'x', background: true, store: false }, 'background'],
    [{ input: [{ type: 'item_reference', id: 'msg_nope' }] }, 'input[0].id'],
  ]) {
    await assert.rejects(client.responses.create(body), (e) => {
      assert.ok([400, 404].includes(e.status), `${e.status} ${e.message}`);
      assert.equal(e.param, param, e.message);
      return true;
    });
  }
});

test('item references resolve to stored items (their generated tokens kept)', async () => {
  const sampled = (input, seed, extra = {}) => ({ input, max_output_tokens: 24, temperature: 1, seed, ...extra });
  const r1 = await client.responses.create(sampled('Hello, who are you?', 7));
  const byRef = await client.responses.create(sampled([
    { role: 'user', content: 'Hello, who are you?' }, { type: 'item_reference', id: r1.output[0].id },
    { role: 'user', content: 'Go on.' },
  ], 8));
  const before = r1.usage.input_tokens + r1.usage.output_tokens;
  assert.ok(byRef.usage.input_tokens_details.cached_tokens >= before - BLOCK,
            `cached ${byRef.usage.input_tokens_details.cached_tokens} of ${before}`);
  const chained = await client.responses.create(sampled('Go on.', 8, { previous_response_id: r1.id }));
  assert.equal(byRef.output_text, chained.output_text);
  assert.equal(byRef.usage.input_tokens, chained.usage.input_tokens);
});

test('background: queued at once, cancelled on request; a foreground response cannot be cancelled', async () => {
  const r = await client.responses.create({ input: 'Write forever.', background: true, max_output_tokens: 900,
                                            temperature: 0 });
  assert.equal(r.background, true);
  assert.ok(['queued', 'in_progress'].includes(r.status), r.status);
  const cancelled = await client.responses.cancel(r.id);
  assert.ok(['cancelled', 'incomplete'].includes(cancelled.status), cancelled.status);  // it may have ended first
  const again = await client.responses.retrieve(r.id);
  assert.equal(again.status, cancelled.status);
  assert.equal(again.usage.output_tokens, cancelled.usage.output_tokens);

  const b = await client.responses.create({ input: 'Hi', background: true, max_output_tokens: 8 });
  let got = b;
  for (let i = 0; i < 100 && ['queued', 'in_progress'].includes(got.status); ++i) {
    await new Promise((res) => setTimeout(res, 50));
    got = await client.responses.retrieve(b.id);
  }
  assert.ok(['incomplete', 'completed'].includes(got.status), got.status);
  assert.ok(got.usage.output_tokens >= 1 && got.usage.output_tokens <= 8);
  assert.equal(got.output[0].type, 'message');

  const fg = await client.responses.create({ input: 'Hi', max_output_tokens: 2 });
  await assert.rejects(client.responses.cancel(fg.id), (e) => e.status === 400);
});

test('--max-storage: a stored response over it gets 507; store: false still answers', async () => {
  const s = await startServer(model.dir, ['-c', '1024', '--max-storage', '1M']);
  const c = s.client();
  try {
    // Fill the store to within 2 KiB of its cap (a stored response needs more).
    const upload = async (bytes) =>
      c.files.create({ file: await toFile(Buffer.from('x'.repeat(bytes)), 'f.jsonl'), purpose: 'batch' });
    const file = await upload(800 << 10);
    for (let i = 0; i < 200; ++i) {
      const full = await upload(2 << 10).then(() => false, (e) => { assert.equal(e.status, 507); return true; });
      if (full) break;
    }
    await assert.rejects(c.responses.create({ input: 'Hi', max_output_tokens: 4 }),
                         (e) => e.status === 507 && e.code === 'storage_limit_exceeded');
    const r = await c.responses.create({ input: 'Hi', max_output_tokens: 4, store: false });
    assert.equal(r.status, 'incomplete');
    await c.files.delete(file.id);
    assert.equal((await c.responses.create({ input: 'Hi', max_output_tokens: 4 })).store, true);
  } finally {
    await s.stop();
  }
});

test('--request-timeout: a 504 for a whole response, error + response.failed events for a streamed one', async () => {
  const s = await startServer(model.dir, ['-c', '4096', '--request-timeout', '0.05']);
  const c = s.client();
  try {
    const body = { input: 'Go on for a long time.', max_output_tokens: 4000, temperature: 0 };
    await assert.rejects(c.responses.create(body), (e) => e.status === 504 && e.code === 'request_timeout');
    const types = [];
    let failed;
    for await (const ev of await c.responses.create({ ...body, stream: true })) {
      types.push(ev.type);
      if (ev.type === 'response.failed') failed = ev.response;
    }
    assert.deepEqual(types.slice(-2), ['error', 'response.failed']);
    assert.equal(failed.status, 'failed');
    assert.match(failed.error.message, /request-timeout|timeout/);
  } finally {
    await s.stop();
  }
});
