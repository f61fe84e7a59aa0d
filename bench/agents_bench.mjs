// Driver for bench/agents_compare.sh: one planner -> 4 parallel executors ->
// summarizer pipeline over a shared ~2000-token context, run three ways against
// a server at URL:
//   naive     one request at a time (run against a spool serve started with --no-prefix-cache --parallel 1)
//   pipeline  POST /v1/pipelines with the same spec, wait for it (spool only)
//   requests  the same requests in the order and concurrency a pipeline uses: planner, 4 executors at once,
//             summarizer (against llama-server -np 4, or spool)
//   multi:N   N such pipelines at once, each over its own context (spool only; bench/agents_retention.sh)
// Prints one JSON line: {"mode", "wall_s", "prompt_tokens", "cached_tokens", "completion_tokens"}.
// usage: node bench/agents_bench.mjs URL MODE [MAX_TOKENS] [CONTEXT_WORDS]
const [url, mode, maxTokensArg, wordsArg] = process.argv.slice(2);
const maxTokens = Number(maxTokensArg ?? 32);
const nWords = Number(wordsArg ?? 1500);

// Deterministic varied text (fixed linear congruential sequence over a word list).
function story(n, seed = 4242) {
  const words = ['the', 'little', 'girl', 'saw', 'a', 'big', 'dog', 'in', 'park', 'and', 'she', 'was', 'happy', 'sun',
    'tree', 'bird', 'ran', 'to', 'her', 'mom', 'ball', 'red', 'played', 'with', 'friend', 'day', 'said', 'yes',
    'river', 'boat', 'cake', 'garden', 'house', 'window', 'rain', 'blue', 'cat', 'jumped', 'over', 'fence'];
  let x = seed;
  const out = [];
  for (let i = 0; i < n; i++) {
    x = (x * 1103515245 + 12345) % 2147483648;
    out.push(words[x % words.length]);
    if (i % 17 === 16) out.push('.');
  }
  return out.join(' ');
}
const context = `Notes from the field: ${story(nWords)}\n\nTask: write a short report about the notes.`;
const parts = ['the people', 'the places', 'the animals', 'the weather'];
const prompt = {
  planner: (c) => `${c}\nPlan the report in four parts:`,
  executor: (c, plan, i) => `${c}\nPlan:\n${plan}\nWrite the part about ${parts[i]}:`,
  summarizer: (c, results) => `${c}\nParts:\n${results}\nFinal report:`,
};
const makeSpec = (task) => ({
  name: 'bench-plan-4-exec-summarize', task, temperature: 0, max_tokens: maxTokens,
  agents: [
    // Names without a built-in role, so no role system prompt goes first: the
    // prompts are exactly the ones the other modes send.
    { name: 'plan', prompt: '{task}\nPlan the report in four parts:' },
    ...parts.map((p, i) => ({ name: `e${i}`, prompt: `{task}\nPlan:\n{agents.plan.output}\nWrite the part about ${p}:` })),
    { name: 'join', prompt: '{task}\nParts:\n{previous}\nFinal report:' },
  ],
  stages: ['plan', { parallel: ['e0', 'e1', 'e2', 'e3'] }, 'join'],
});
const spec = makeSpec(context);

const totals = { prompt_tokens: 0, cached_tokens: 0, completion_tokens: 0 };
async function complete(p) {
  const r = await fetch(`${url}/v1/completions`, {
    method: 'POST', headers: { 'Content-Type': 'application/json' },
    body: JSON.stringify({ prompt: p, max_tokens: maxTokens, temperature: 0, ignore_eos: true, cache_prompt: true }),
  });
  const j = await r.json();
  if (!r.ok) throw new Error(JSON.stringify(j));
  totals.prompt_tokens += j.usage.prompt_tokens;
  totals.cached_tokens += j.usage.prompt_tokens_details?.cached_tokens ?? 0;
  totals.completion_tokens += j.usage.completion_tokens;
  return j.choices[0].text;
}

const t0 = performance.now();
async function runPipelines(specs) {
  const ids = [];
  for (const sp of specs) {
    const r = await fetch(`${url}/v1/pipelines`, { method: 'POST', body: JSON.stringify(sp) });
    const j = await r.json();
    if (!r.ok) throw new Error(JSON.stringify(j));
    ids.push(j.id);
  }
  const walls = [];
  await Promise.all(ids.map(async (id) => {
    let run;
    for (;;) {
      run = await (await fetch(`${url}/v1/pipelines/${id}`)).json();
      if (['completed', 'failed', 'cancelled'].includes(run.status)) break;
      await new Promise((res) => setTimeout(res, 20));
    }
    if (run.status !== 'completed') throw new Error(JSON.stringify(run));
    walls.push(Number(((performance.now() - t0) / 1000).toFixed(2)));
    for (const a of run.agents) {
      totals.prompt_tokens += a.prompt_tokens;
      totals.cached_tokens += a.cached_tokens;
      totals.completion_tokens += a.tokens;
    }
  }));
  return walls;
}

let extra = {};
if (mode === 'pipeline') {
  await runPipelines([spec]);
} else if (mode.startsWith('multi:')) {
  const n = Number(mode.slice(6));
  const specs = Array.from({ length: n }, (_, i) => makeSpec(
    `Notes from the field: ${story(nWords, 4242 + 7919 * i)}\n\nTask: write a short report about the notes.`));
  extra = { pipelines: n, finished_at_s: (await runPipelines(specs)).sort((x, y) => x - y) };
} else {
  const plan = await complete(prompt.planner(context));
  let outs;
  if (mode === 'naive') {
    outs = [];
    for (let i = 0; i < 4; i++) outs.push(await complete(prompt.executor(context, plan, i)));
  } else {
    outs = await Promise.all([0, 1, 2, 3].map((i) => complete(prompt.executor(context, plan, i))));
  }
  await complete(prompt.summarizer(context, outs.map((o, i) => `[e${i}]\n${o}`).join('\n\n')));
}
const wall = (performance.now() - t0) / 1000;
console.log(JSON.stringify({ mode, wall_s: Number(wall.toFixed(2)), ...totals, ...extra }));
