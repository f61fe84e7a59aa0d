// What client libraries send beyond the basics (issue 25, items 6 and 8),
// through the official openai client against real `spool serve`s:
// logit_bias on stories260K (+100 forces a token, -100 bans the greedy one,
// 400s naming the field); on qwen2-tiny with a Hermes-style template: legacy
// `functions` / `function_call` answered with message.function_call, the
// `developer` role rendered as `system`, unknown roles refused, and tool calls
// cut by max_tokens returned as their complete calls, never as text.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { startServer, qwen2TinyWithTemplate, STORIES } from './helpers.mjs';

const here = path.dirname(fileURLToPath(import.meta.url));
const PROMPT = 'Once upon a time';

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
const messages = [{ role: 'user', content: 'What is the weather in Paris?' }];

let stories, qwen, model;
before(async () => {
  stories = await startServer(STORIES);
  model = qwen2TinyWithTemplate(path.join(here, 'fixtures/tools_chat_template.jinja'));
  qwen = await startServer(model.dir, ['-c', '1024']);  // the fixture's 256 positions do not hold the tool list
});
after(async () => {
  if (stories) await stories.stop();
  if (qwen) await qwen.stop();
  model?.remove();
});

async function tokenize(url, content) {
  const res = await fetch(`${url}/tokenize`, {
    method: 'POST', headers: { 'Content-Type': 'application/json' },
    body: JSON.stringify({ content, with_pieces: true }),
  });
  return (await res.json()).tokens;
}

// The id of the token greedy decoding puts after PROMPT, and its text.
async function greedyNext(client) {
  const r = await client.completions.create({ prompt: PROMPT, max_tokens: 1, temperature: 0 });
  const text = r.choices[0].text;
  const prompt = await tokenize(stories.url, PROMPT);
  const whole = await tokenize(stories.url, PROMPT + text);
  assert.equal(whole.length, prompt.length + 1, JSON.stringify(whole));
  assert.equal(whole.at(-1).piece, text);
  return { id: whole.at(-1).id, text };
}

test('logit_bias +100 makes greedy and sampled output that token', async () => {
  const client = stories.client();
  const next = await greedyNext(client);
  const [forced] = await tokenize(stories.url, ' dragon');  // not what greedy picks here
  assert.notEqual(forced.id, next.id);
  const plain = await client.completions.create({ prompt: PROMPT, max_tokens: 4, temperature: 0 });
  assert.notEqual(plain.choices[0].text, forced.piece.repeat(4));
  for (const temperature of [0, 1]) {
    const r = await client.completions.create({
      prompt: PROMPT, max_tokens: 4, temperature, seed: 5, logit_bias: { [forced.id]: 100 },
    });
    assert.equal(r.choices[0].text, forced.piece.repeat(4), `temperature ${temperature}`);
  }
  const chat = await qwen.client().chat.completions.create({
    messages, max_tokens: 3, temperature: 0, logit_bias: { [(await tokenize(qwen.url, 'x'))[0].id]: 100 },
  });
  assert.equal(chat.choices[0].message.content, 'xxx');
});

test('logit_bias -100 bans the greedy token', async () => {
  const client = stories.client();
  const next = await greedyNext(client);
  for (const temperature of [0, 1]) {
    for (let seed = 0; seed < (temperature ? 5 : 1); ++seed) {
      const r = await client.completions.create({
        prompt: PROMPT, max_tokens: 1, temperature, seed, logit_bias: { [next.id]: -100 },
      });
      assert.ok(r.choices[0].text.length > 0);
      assert.notEqual(r.choices[0].text, next.text, `temperature ${temperature} seed ${seed}`);
    }
  }
  // A small bias leaves the greedy choice alone.
  const mild = await client.completions.create({ prompt: PROMPT, max_tokens: 1, temperature: 0, logit_bias: { [next.id]: -0.001 } });
  assert.equal(mild.choices[0].text, next.text);
});

test('bad logit_bias is a 400 naming logit_bias', async () => {
  const client = stories.client();
  for (const logit_bias of [{ 999999: 5 }, { 12: 101 }, { 12: -150 }, { abc: 1 }, { 12: 'up' }, [1, 2]]) {
    await assert.rejects(client.completions.create({ prompt: PROMPT, max_tokens: 1, logit_bias }),
      (e) => e.status === 400 && e.param === 'logit_bias', JSON.stringify(logit_bias));
  }
});

test('legacy functions / function_call are answered with message.function_call', async () => {
  const client = qwen.client();
  const functions = TOOLS.map((t) => t.function);
  const r = await client.chat.completions.create({
    messages, functions, function_call: { name: 'add' }, temperature: 0, max_tokens: 300,
  });
  const choice = r.choices[0];
  assert.equal(choice.finish_reason, 'function_call', JSON.stringify(choice));
  assert.equal(choice.message.content, null);
  assert.equal(choice.message.tool_calls, undefined);
  assert.equal(choice.message.function_call.name, 'add');
  const args = JSON.parse(choice.message.function_call.arguments);
  assert.ok(Number.isInteger(args.a) && Number.isInteger(args.b), choice.message.function_call.arguments);

  // Streamed: delta.function_call, its name first, then the arguments.
  const stream = await client.chat.completions.create({
    messages, functions, function_call: { name: 'add' }, temperature: 0, max_tokens: 300, stream: true,
  });
  let name = '', streamedArgs = '', finish = null;
  for await (const chunk of stream) {
    const c = chunk.choices[0];
    if (!c) continue;
    assert.equal(c.delta?.tool_calls, undefined);
    if (c.delta?.function_call?.name) name += c.delta.function_call.name;
    if (c.delta?.function_call?.arguments) streamedArgs += c.delta.function_call.arguments;
    if (c.finish_reason) finish = c.finish_reason;
  }
  assert.equal(name, 'add');
  assert.deepEqual(JSON.parse(streamedArgs), args);
  assert.equal(finish, 'function_call');

  // function_call "auto" (the default): one call at most; "none": text.
  const auto = await client.chat.completions.create({ messages, functions, temperature: 0, max_tokens: 300 });
  if (auto.choices[0].finish_reason === 'function_call') assert.equal(typeof auto.choices[0].message.function_call.name, 'string');
  else assert.equal(auto.choices[0].message.function_call, undefined);
  const none = await client.chat.completions.create({ messages, functions, function_call: 'none', temperature: 0, max_tokens: 8 });
  assert.equal(typeof none.choices[0].message.content, 'string');
  assert.equal(none.choices[0].message.function_call, undefined);

  // The functions reach the template as tools; a legacy call and its result render as a tool call and result.
  const plain = await client.chat.completions.create({ messages, max_tokens: 1, temperature: 0 });
  const withFunctions = await client.chat.completions.create({ messages, functions, function_call: 'none', max_tokens: 1, temperature: 0 });
  assert.ok(withFunctions.usage.prompt_tokens > plain.usage.prompt_tokens + 30, 'the functions were not rendered');
  const history = [
    ...messages,
    { role: 'assistant', content: null, function_call: { name: 'get_weather', arguments: '{"city":"Paris","unit":"celsius"}' } },
    { role: 'function', name: 'get_weather', content: 'It is 21 degrees and sunny with a light breeze from the west.' },
  ];
  const withResult = await client.chat.completions.create({ messages: history, functions, function_call: 'none', max_tokens: 1, temperature: 0 });
  assert.ok(withResult.usage.prompt_tokens > withFunctions.usage.prompt_tokens + 30, 'the call and result were not rendered');

  await assert.rejects(client.chat.completions.create({ messages, functions, function_call: { name: 'nope' } }),
    (e) => e.status === 400 && e.param === 'function_call');
  await assert.rejects(client.chat.completions.create({ messages, tools: TOOLS, functions }),
    (e) => e.status === 400 && e.param === 'functions');
});

test('the developer role renders as system; unknown roles are a 400', async () => {
  const client = qwen.client();
  const turn = (role) => [{ role, content: 'Be brief.' }, { role: 'user', content: 'Hi' }];
  const dev = await client.chat.completions.create({ messages: turn('developer'), max_tokens: 6, temperature: 0 });
  const sys = await client.chat.completions.create({ messages: turn('system'), max_tokens: 6, temperature: 0 });
  const expected = await tokenize(qwen.url,
    '<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n');
  assert.equal(dev.usage.prompt_tokens, expected.length);
  assert.equal(dev.choices[0].message.content, sys.choices[0].message.content);
  await assert.rejects(client.chat.completions.create({ messages: [{ role: 'user', content: 'a' }, { role: 'wizard', content: 'b' }] }),
    (e) => e.status === 400 && e.param === 'messages[1].role' && /wizard/.test(e.message));
});

// Calls cut by max_tokens: a greedy answer of several parallel calls, cut at
// many lengths; each reply holds the complete calls before the cut (the same
// as the uncut answer's first ones) and no call syntax in content.
async function checkCuts(client, extra) {
  const body = { messages, tools: TOOLS, tool_choice: 'required', temperature: 0, ...extra };
  const full = await client.chat.completions.create({ ...body, max_tokens: 1000 });
  assert.equal(full.choices[0].finish_reason, 'tool_calls', JSON.stringify(full.choices[0]));
  const fullCalls = full.choices[0].message.tool_calls.map((c) => [c.function.name, c.function.arguments]);
  assert.ok(fullCalls.length >= 2, `the greedy answer has ${fullCalls.length} call(s); the test needs parallel calls`);
  const n = full.usage.completion_tokens;
  let cutAfterACall = 0;
  for (let k = 1; k <= 12; ++k) {
    const max_tokens = Math.max(1, Math.floor((n * k) / 13));
    const r = await client.chat.completions.create({ ...body, max_tokens });
    const c = r.choices[0];
    const label = `max_tokens ${max_tokens} of ${n}: ${JSON.stringify(c)}`;
    assert.equal(c.finish_reason, 'length', label);
    const calls = (c.message.tool_calls ?? []).map((t) => [t.function.name, t.function.arguments]);
    assert.equal(c.message.content, calls.length ? null : '', label);
    assert.ok(calls.length < fullCalls.length, label);
    assert.deepEqual(calls, fullCalls.slice(0, calls.length), label);
    for (const t of c.message.tool_calls ?? []) JSON.parse(t.function.arguments);
    if (calls.length >= 1) ++cutAfterACall;
  }
  assert.ok(cutAfterACall >= 2, `only ${cutAfterACall} cut(s) came after a complete call`);
}

test('tool calls cut by max_tokens: complete calls returned, the cut one dropped, no syntax in content', async () => {
  await checkCuts(qwen.client(), {});
});

test('the same with a response_format', async () => {
  const schema = { type: 'object', properties: { answer: { type: 'string' } }, required: ['answer'] };
  await checkCuts(qwen.client(), { response_format: { type: 'json_schema', json_schema: { name: 'a', schema } } });
});
