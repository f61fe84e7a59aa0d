// Tool calls through the official openai client against a real `spool
// serve` on qwen2-tiny (random weights, so only the grammar makes its calls
// valid): tool_choice required / named / auto / none, non-streamed and
// streamed (tool-call deltas), arguments validated by ajv against each tool's
// parameters; a template that renders tools (tests/api/fixtures) and one that
// does not (the tools then go in a system message); tool results in history;
// tools with a response_format; compact_json; tool calls in Batch API output.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import Ajv2020 from 'ajv/dist/2020.js';
import { startServer, qwen2TinyWithTemplate } from './helpers.mjs';

const here = path.dirname(fileURLToPath(import.meta.url));
const ajv = new Ajv2020({ strict: false });

const TOOLS = [
  {
    type: 'function',
    function: {
      name: 'get_weather', description: 'Weather for a city',
      parameters: {
        type: 'object',
        properties: { city: { type: 'string', maxLength: 12 }, unit: { enum: ['celsius', 'fahrenheit'] } },
        required: ['city', 'unit'], additionalProperties: false,
      },
    },
  },
  {
    type: 'function',
    function: {
      name: 'add',
      parameters: {
        type: 'object', properties: { a: { type: 'integer' }, b: { type: 'integer' } },
        required: ['a', 'b'], additionalProperties: false,
      },
    },
  },
];
const validators = Object.fromEntries(TOOLS.map((t) => [t.function.name, ajv.compile(t.function.parameters)]));

function assertValidCalls(calls) {
  assert.ok(Array.isArray(calls) && calls.length >= 1, JSON.stringify(calls));
  for (const c of calls) {
    assert.equal(c.type, 'function');
    assert.match(c.id, /^call_/);
    const validate = validators[c.function.name];
    assert.ok(validate, `unknown tool ${c.function.name}`);
    const args = JSON.parse(c.function.arguments);
    assert.ok(validate(args), `${c.function.arguments}: ${ajv.errorsText(validate.errors)}`);
  }
}

// Accumulates streamed tool-call deltas as OpenAI clients do.
async function streamedCalls(client, body) {
  const stream = await client.chat.completions.create({ ...body, stream: true });
  const calls = [];
  let finish = null, content = '';
  for await (const chunk of stream) {
    const choice = chunk.choices[0];
    if (!choice) continue;
    if (choice.finish_reason) finish = choice.finish_reason;
    if (choice.delta?.content) content += choice.delta.content;
    for (const d of choice.delta?.tool_calls ?? []) {
      calls[d.index] ??= { id: '', type: 'function', function: { name: '', arguments: '' } };
      if (d.id) calls[d.index].id = d.id;
      if (d.function?.name) calls[d.index].function.name += d.function.name;
      if (d.function?.arguments) calls[d.index].function.arguments += d.function.arguments;
    }
  }
  return { calls, finish, content };
}

for (const [label, template] of [
  ['a template that renders tools', path.join(here, 'fixtures/tools_chat_template.jinja')],
  ['a template without tools', undefined],
]) {
  let model, server, client;
  const messages = [{ role: 'user', content: 'What is the weather in Paris?' }];

  test(`${label}: setup`, async () => {
    model = qwen2TinyWithTemplate(template);
    server = await startServer(model.dir, ['-c', '1024']);  // the fixture's 256 positions do not hold the tool list
    client = server.client();
  });

  test(`${label}: tool_choice required, non-streamed`, async () => {
    for (let i = 0; i < 6; ++i) {
      const r = await client.chat.completions.create({
        messages, tools: TOOLS, tool_choice: 'required', temperature: 1, seed: i, max_tokens: 300,
      });
      assert.equal(r.choices[0].finish_reason, 'tool_calls', JSON.stringify(r.choices[0]));
      assert.equal(r.choices[0].message.content, null);
      assertValidCalls(r.choices[0].message.tool_calls);
    }
  });

  test(`${label}: streamed calls arrive in pieces and equal the non-streamed ones`, async () => {
    const body = { messages, tools: TOOLS, tool_choice: 'required', temperature: 1, seed: 11, max_tokens: 600 };
    const whole = await client.chat.completions.create(body);
    assert.equal(whole.choices[0].finish_reason, 'tool_calls', JSON.stringify(whole.choices[0]));
    const stream = await client.chat.completions.create({ ...body, stream: true });
    let argDeltas = 0;
    const calls = [];
    for await (const chunk of stream) {
      for (const d of chunk.choices[0]?.delta?.tool_calls ?? []) {
        calls[d.index] ??= { name: '', arguments: '' };
        if (d.function?.name) calls[d.index].name = d.function.name;
        if (d.function?.arguments) { calls[d.index].arguments += d.function.arguments; ++argDeltas; }
      }
    }
    assert.ok(argDeltas > calls.length, `arguments came in ${argDeltas} deltas for ${calls.length} calls`);
    const parse = (t) => { try { return JSON.parse(t); } catch (e) { throw new Error(`${e.message}: ${JSON.stringify(t)}`); } };
    assert.deepEqual(calls.map((c) => [c.name, parse(c.arguments)]),
      whole.choices[0].message.tool_calls.map((c) => [c.function.name, JSON.parse(c.function.arguments)]));
  });

  test(`${label}: a named function, streamed`, async () => {
    for (let i = 0; i < 4; ++i) {
      const { calls, finish } = await streamedCalls(client, {
        messages, tools: TOOLS, tool_choice: { type: 'function', function: { name: 'add' } }, temperature: 1, seed: i,
        max_tokens: 300,
      });
      assert.equal(finish, 'tool_calls');
      assert.equal(calls.length, 1);
      assert.equal(calls[0].function.name, 'add');
      assertValidCalls(calls);
    }
  });

  test(`${label}: auto gives text or valid calls, streamed and not`, async () => {
    for (let i = 0; i < 6; ++i) {
      const body = { messages, tools: TOOLS, temperature: 1, seed: 100 + i, max_tokens: 40 };
      const r = await client.chat.completions.create(body);
      const s = await streamedCalls(client, body);
      if (r.choices[0].finish_reason === 'tool_calls') {
        assertValidCalls(r.choices[0].message.tool_calls);
        assert.equal(s.finish, 'tool_calls');
        assert.deepEqual(s.calls.map((c) => [c.function.name, JSON.parse(c.function.arguments)]),
          r.choices[0].message.tool_calls.map((c) => [c.function.name, JSON.parse(c.function.arguments)]));
      } else {
        assert.equal(typeof r.choices[0].message.content, 'string');
        assert.equal(r.choices[0].message.tool_calls, undefined);
        assert.equal(s.content, r.choices[0].message.content);
      }
    }
  });

  test(`${label}: tool_choice none is plain text; tool results render`, async () => {
    const r = await client.chat.completions.create({ messages, tools: TOOLS, tool_choice: 'none', max_tokens: 8, temperature: 0 });
    assert.equal(typeof r.choices[0].message.content, 'string');
    assert.notEqual(r.choices[0].finish_reason, 'tool_calls');
    const history = [
      ...messages,
      { role: 'assistant', content: null, tool_calls: [{ id: 'call_1', type: 'function', function: { name: 'get_weather', arguments: '{"city":"Paris","unit":"celsius"}' } }] },
      { role: 'tool', tool_call_id: 'call_1', content: 'It is 21 degrees and sunny with a light breeze from the west.' },
    ];
    const withResult = await client.chat.completions.create({ messages: history, tools: TOOLS, max_tokens: 4, temperature: 0 });
    const without = await client.chat.completions.create({ messages, tools: TOOLS, max_tokens: 4, temperature: 0 });
    assert.ok(withResult.usage.prompt_tokens > without.usage.prompt_tokens + 20, 'the tool call and result were not rendered');
    const noTools = await client.chat.completions.create({ messages, max_tokens: 4, temperature: 0 });
    assert.ok(without.usage.prompt_tokens > noTools.usage.prompt_tokens + 30, 'the tools were not rendered');
  });

  test(`${label}: tools with a response_format: calls, or an answer valid under the schema`, async () => {
    const ANSWER = { type: 'object', properties: { answer: { type: 'string', maxLength: 20 }, sure: { type: 'boolean' } }, required: ['answer', 'sure'], additionalProperties: false };
    const response_format = { type: 'json_schema', json_schema: { name: 'answer', schema: ANSWER } };
    const checkAnswer = (content) => {
      const v = JSON.parse(content);
      assert.ok(ajv.validate(ANSWER, v), `${content}: ${ajv.errorsText()}`);
    };
    let calls = 0, answers = 0;
    for (let i = 0; i < 8; ++i) {
      const body = { messages, tools: TOOLS, response_format, temperature: 1, seed: 200 + i, max_tokens: 300 };
      const r = await client.chat.completions.create(body);
      const s = await streamedCalls(client, body);
      if (r.choices[0].finish_reason === 'tool_calls') {
        ++calls;
        assertValidCalls(r.choices[0].message.tool_calls);
        assert.deepEqual(s.calls.map((c) => [c.function.name, JSON.parse(c.function.arguments)]),
          r.choices[0].message.tool_calls.map((c) => [c.function.name, JSON.parse(c.function.arguments)]));
      } else {
        ++answers;
        assert.equal(r.choices[0].finish_reason, 'stop', JSON.stringify(r.choices[0]));
        checkAnswer(r.choices[0].message.content);
        assert.equal(s.content, r.choices[0].message.content);
        assert.equal(s.calls.length, 0);
      }
    }
    assert.equal(calls + answers, 8);
    // required: calls only; none: the formatted answer only.
    const req = await client.chat.completions.create({ messages, tools: TOOLS, tool_choice: 'required', parallel_tool_calls: false, response_format, temperature: 1, seed: 3, max_tokens: 400 });
    assert.equal(req.choices[0].finish_reason, 'tool_calls');
    assertValidCalls(req.choices[0].message.tool_calls);
    const none = await client.chat.completions.create({ messages, tools: TOOLS, tool_choice: 'none', response_format, temperature: 1, seed: 3, max_tokens: 300 });
    assert.equal(none.choices[0].finish_reason, 'stop');
    checkAnswer(none.choices[0].message.content);
    // A GBNF grammar cannot be combined with tools.
    const bad = await fetch(`${server.url}/v1/chat/completions`, {
      method: 'POST', headers: { 'Content-Type': 'application/json' },
      body: JSON.stringify({ messages, tools: TOOLS, grammar: 'root ::= "x"' }),
    });
    assert.equal(bad.status, 400);
    assert.equal((await bad.json()).error.param, 'tools');
  });

  test(`${label}: compact_json leaves no whitespace between JSON tokens`, async () => {
    // Outside strings, a compact output has no blanks at all.
    const blanksOutsideStrings = (t) => {
      let inString = false, escape = false, n = 0;
      for (const c of t) {
        if (inString) { if (escape) escape = false; else if (c === '\\') escape = true; else if (c === '"') inString = false; continue; }
        if (c === '"') inString = true;
        else if (' \n\t\r'.includes(c)) ++n;
      }
      return n;
    };
    let loose = 0;
    for (let i = 0; i < 4; ++i) {
      const body = { messages, tools: TOOLS, tool_choice: 'required', parallel_tool_calls: false, temperature: 1, seed: 300 + i, max_tokens: 400 };
      const compact = await client.chat.completions.create({ ...body, compact_json: true });
      assertValidCalls(compact.choices[0].message.tool_calls);
      for (const c of compact.choices[0].message.tool_calls) assert.equal(blanksOutsideStrings(c.function.arguments), 0, c.function.arguments);
      const schema = { type: 'object', properties: { xs: { type: 'array', items: { type: 'integer' }, minItems: 3, maxItems: 3 } }, required: ['xs'] };
      const fmt = { type: 'json_schema', json_schema: { name: 'xs', schema } };
      const r = await client.chat.completions.create({ messages, response_format: fmt, compact_json: true, temperature: 1, seed: 300 + i, max_tokens: 200 });
      assert.ok(ajv.validate(schema, JSON.parse(r.choices[0].message.content)), r.choices[0].message.content);
      assert.equal(blanksOutsideStrings(r.choices[0].message.content), 0, r.choices[0].message.content);
      const free = await client.chat.completions.create({ messages, response_format: fmt, temperature: 1, seed: 300 + i, max_tokens: 200 });
      loose += blanksOutsideStrings(free.choices[0].message.content);
    }
    assert.ok(loose > 0, 'without compact_json this random model writes some blanks (else the test proves nothing)');
  });

  test(`${label}: tool calls in Batch API output lines`, async () => {
    const { toFile } = await import('openai');
    const lines = [0, 1, 2].map((i) => JSON.stringify({
      custom_id: `t-${i}`, method: 'POST', url: '/v1/chat/completions',
      body: { messages, tools: TOOLS, tool_choice: 'required', temperature: 1, seed: 400 + i, max_tokens: 300 },
    })).join('\n') + '\n';
    const file = await client.files.create({ file: await toFile(Buffer.from(lines), 'tools.jsonl'), purpose: 'batch' });
    const batch = await client.batches.create({ input_file_id: file.id, endpoint: '/v1/chat/completions', completion_window: '24h' });
    let b;
    for (let k = 0; k < 600; ++k) {
      b = await client.batches.retrieve(batch.id);
      if (['completed', 'failed', 'cancelled'].includes(b.status)) break;
      await new Promise((r) => setTimeout(r, 100));
    }
    assert.equal(b.status, 'completed', JSON.stringify(b));
    const out = (await (await client.files.content(b.output_file_id)).text()).trim().split('\n').map((l) => JSON.parse(l));
    assert.equal(out.length, 3);
    for (const o of out) {
      const choice = o.response.body.choices[0];
      assert.equal(choice.finish_reason, 'tool_calls', JSON.stringify(choice));
      assert.equal(choice.message.content, null);
      assertValidCalls(choice.message.tool_calls);
    }
  });

  test(`${label}: bad tools are 400s`, async () => {
    await assert.rejects(client.chat.completions.create({ messages, tools: TOOLS, tool_choice: { type: 'function', function: { name: 'nope' } } }),
      (e) => e.status === 400 && /'nope', which is not in 'tools'/.test(e.message));
    await assert.rejects(client.chat.completions.create({ messages, tools: [{ type: 'function', function: { name: 'x', parameters: { type: 'object', properties: { a: { type: 'nope' } } } } }], tool_choice: 'required' }),
      (e) => e.status === 400 && /unknown type 'nope'/.test(e.message));
  });

  test(`${label}: teardown`, async () => {
    await server.stop();
    model.remove();
  });
}
