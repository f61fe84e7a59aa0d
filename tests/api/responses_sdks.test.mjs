// Agent frameworks in their default modes, which call /v1/responses: the
// OpenAI Agents SDK (its default Responses provider pointed at the server) runs
// a tool-using agent, a handoff and a streamed run; the Vercel AI SDK's default
// OpenAI provider runs generateText (with a tool, whose second step sends the
// call and its output back as items) and streamText. qwen2-tiny has random
// weights: tool_choice 'required' and structured outputs make its answers end.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { startServer, qwen2TinyWithTemplate } from './helpers.mjs';

const here = path.dirname(fileURLToPath(import.meta.url));
let agents, aiSdk, aiOpenAI, z;
try {
  [agents, aiSdk, aiOpenAI, z] = await Promise.all([
    import('@openai/agents'), import('ai'), import('@ai-sdk/openai'), import('zod').then((m) => m.z),
  ]);
} catch {
  // Not installed (npm ci --prefix tests/api installs them): the tests below skip.
}
const skip = agents ? false : 'the agent SDKs are not installed (npm ci --prefix tests/api)';

let model, server;
before(async () => {
  if (skip) return;
  model = qwen2TinyWithTemplate(path.join(here, 'fixtures/tools_chat_template.jinja'));
  server = await startServer(model.dir, ['-c', '2048']);
  agents.setTracingDisabled(true);
  agents.setDefaultModelProvider(new agents.OpenAIProvider({ baseURL: `${server.url}/v1`, apiKey: 'none' }));
});
after(async () => {
  if (server) await server.stop();
  model?.remove();
});

const settings = { maxTokens: 200, temperature: 0 };

test('Agents SDK: a tool-using agent, streamed and not', { skip }, async () => {
  const cities = [];
  const getWeather = agents.tool({
    name: 'get_weather', description: 'Weather for a city', parameters: z.object({ city: z.string().max(12) }),
    execute: async ({ city }) => { cities.push(city); return `sunny in ${city}`; },
  });
  const agent = new agents.Agent({
    name: 'Weather', instructions: 'Answer with the weather.', tools: [getWeather], model: server.modelId,
    outputType: z.object({ answer: z.string().max(20) }),
    modelSettings: { ...settings, toolChoice: 'required', parallelToolCalls: false },
  });
  const result = await agents.run(agent, 'What is the weather in Paris?', { maxTurns: 6 });
  assert.equal(cities.length >= 1, true);
  assert.equal(typeof result.finalOutput.answer, 'string');
  assert.ok(result.newItems.some((i) => i.type === 'tool_call_output_item'));

  const streamed = await agents.run(agent, 'Weather in Rome?', { maxTurns: 6, stream: true });
  let events = 0;
  for await (const ev of streamed) if (ev.type === 'raw_model_stream_event') ++events;
  await streamed.completed;
  assert.ok(events > 0);
  assert.equal(typeof streamed.finalOutput.answer, 'string');
});

test('Agents SDK: a handoff to another agent', { skip }, async () => {
  const expert = new agents.Agent({
    name: 'Expert', instructions: 'You answer.', handoffDescription: 'answers everything', model: server.modelId,
    outputType: z.object({ answer: z.string().max(20) }), modelSettings: settings,
  });
  const triage = new agents.Agent({
    name: 'Triage', instructions: 'Hand the question off.', handoffs: [expert], model: server.modelId,
    modelSettings: { ...settings, toolChoice: 'required', parallelToolCalls: false },
  });
  const result = await agents.run(triage, 'Help me.', { maxTurns: 4 });
  assert.equal(result.lastAgent.name, 'Expert');
  assert.equal(typeof result.finalOutput.answer, 'string');
});

test('AI SDK: generateText (with a tool over two steps) and streamText through the default provider', { skip }, async () => {
  const openai = aiOpenAI.createOpenAI({ baseURL: `${server.url}/v1`, apiKey: 'none' });
  const g = await aiSdk.generateText({ model: openai(server.modelId), prompt: 'Hello', maxOutputTokens: 16, temperature: 0 });
  assert.equal(g.finishReason, 'length');
  assert.equal(g.usage.outputTokens, 16);
  assert.ok(g.text.length > 0);

  const s = aiSdk.streamText({ model: openai(server.modelId), prompt: 'Hello', maxOutputTokens: 16, temperature: 0 });
  let text = '';
  for await (const delta of s.textStream) text += delta;
  assert.equal(text, g.text);

  const bodies = [];  // what the provider sends
  const recording = aiOpenAI.createOpenAI({
    baseURL: `${server.url}/v1`, apiKey: 'none',
    fetch: (url, init) => { bodies.push(JSON.parse(init.body)); return fetch(url, init); },
  });
  const cities = [];
  const withTool = await aiSdk.generateText({
    model: recording(server.modelId), prompt: 'What is the weather in Paris?', maxOutputTokens: 200, temperature: 0,
    toolChoice: 'required', stopWhen: aiSdk.stepCountIs(2),
    providerOptions: { openai: { parallelToolCalls: false } },
    tools: {
      get_weather: aiSdk.tool({
        description: 'Weather for a city', inputSchema: z.object({ city: z.string().max(12) }),
        execute: async ({ city }) => { cities.push(city); return `sunny in ${city}`; },
      }),
    },
  });
  assert.equal(withTool.steps.length, 2);
  assert.equal(cities.length, 2);
  assert.equal(withTool.steps[1].toolCalls.length, 1);
  assert.equal(bodies.length, 2);
  // The call goes back as a function_call item (or a reference to it) with its output.
  assert.ok(bodies[1].input.some((i) => ['function_call', 'item_reference'].includes(i.type)), JSON.stringify(bodies[1].input));
  assert.ok(bodies[1].input.some((i) => i.type === 'function_call_output'));
});
