// Driver for bench/agents_moe.sh: the planner -> 4 executors -> summarizer
// pipeline of bench/agents_bench.mjs over a short context, against a spool
// serve that streams a MoE, in one of two modes:
//   batched     the executors' stage decodes as one batch (enable_batch true)
//   sequential  the same executors one at a time (enable_batch false): each alone
// Samples /metrics (weight-store counters) every 25 ms and the run's SSE
// events, and reports the executors' decode window: tokens, seconds, the
// aggregate decode tok/s, and the weight store's bytes read, units looked up
// and cache hits per generated token inside that window.
// usage: node bench/agents_moe.mjs URL MODE [MAX_TOKENS] [CONTEXT_WORDS]
const [url, mode, maxTokensArg, wordsArg] = process.argv.slice(2);
const maxTokens = Number(maxTokensArg ?? 16);
const nWords = Number(wordsArg ?? 60);
const words = ['the', 'little', 'girl', 'saw', 'a', 'big', 'dog', 'in', 'park', 'and', 'she', 'was', 'happy', 'sun'];
let x = 4242;
const notes = Array.from({ length: nWords }, () => words[(x = (x * 1103515245 + 12345) % 2147483648) % words.length]).join(' ');
const parts = ['the people', 'the places', 'the animals', 'the weather'];
const spec = {
  name: 'bench-moe', task: `Notes from the field: ${notes}\n\nTask: write a short report about the notes.`,
  temperature: 0, max_tokens: maxTokens, enable_batch: mode === 'batched',
  agents: [
    { name: 'plan', prompt: '{task}\nPlan the report in four parts:', max_tokens: 8 },
    ...parts.map((p, i) => ({ name: `e${i}`, prompt: `{task}\nPlan:\n{agents.plan.output}\nWrite the part about ${p}:` })),
    { name: 'join', prompt: '{task}\nParts:\n{previous}\nFinal report:', max_tokens: 4 },
  ],
  stages: ['plan', { parallel: ['e0', 'e1', 'e2', 'e3'] }, 'join'],
};

const samples = [];  // [t, bytes, lookups, hits]
let sampling = true;
const now = () => performance.now() / 1000;
async function sampleLoop() {
  while (sampling) {
    const t = now();
    const text = await (await fetch(`${url}/metrics`)).text();
    const get = (name) => Number((text.match(new RegExp(`^${name} (\\S+)$`, 'm')) ?? [0, 'NaN'])[1]);
    samples.push([t, get('spool_weight_bytes_read_total'), get('spool_weight_cache_lookups_total'),
      get('spool_weight_cache_hits_total')]);
    await new Promise((r) => setTimeout(r, 25));
  }
}
// A counter's value at time t, interpolated between samples.
function at(t, k) {
  let i = samples.findIndex((s) => s[0] >= t);
  if (i < 0) return samples[samples.length - 1][k];
  if (i === 0) return samples[0][k];
  const [a, b] = [samples[i - 1], samples[i]];
  return a[k] + ((b[k] - a[k]) * (t - a[0])) / Math.max(1e-9, b[0] - a[0]);
}

const loop = sampleLoop();
const r = await fetch(`${url}/v1/pipelines`, { method: 'POST', body: JSON.stringify(spec) });
const { id } = await r.json();
if (!r.ok) throw new Error(JSON.stringify(id));
// Per executor: the times of its token events and of its output event.
const first = {}, done = {}, tokens = {}, times = {};
const res = await fetch(`${url}/v1/pipelines/${id}/events`);
const reader = res.body.getReader();
let buf = '', finished = false;
while (!finished) {
  const { value, done: end } = await reader.read();
  if (end) break;
  buf += new TextDecoder().decode(value);
  let k;
  while ((k = buf.indexOf('\n\n')) >= 0) {
    const block = buf.slice(0, k);
    buf = buf.slice(k + 2);
    const data = block.split('\n').find((l) => l.startsWith('data: '));
    if (!data) continue;
    const ev = JSON.parse(data.slice(6));
    const t = now();
    if (!/^e\d$/.test(ev.agent ?? '')) { if (ev.type === 'done') finished = true; continue; }
    if (ev.type === 'token') {
      if (first[ev.agent] === undefined) first[ev.agent] = t;
      (times[ev.agent] ??= []).push(t);
    }
    if (ev.type === 'output') { done[ev.agent] = t; tokens[ev.agent] = ev.tokens; }
  }
}
await new Promise((r) => setTimeout(r, 100));
sampling = false;
await loop;
const run = await (await fetch(`${url}/v1/pipelines/${id}`)).json();
if (run.status !== 'completed') throw new Error(JSON.stringify(run));

// Decode windows, prefill excluded: batched, while all executors decode together (from the last one's first token to
// the first one's end); sequential, each executor from its own first token to its end, summed. Tokens: the token
// events inside the windows (a token whose text is held back as an incomplete UTF-8 sequence shows up with the next).
const names = Object.keys(done).sort();
const windows = mode === 'batched'
  ? [[Math.max(...names.map((n) => first[n])), Math.min(...names.map((n) => done[n]))]]
  : names.map((n) => [first[n], done[n]]);
const decodeTokens = names.reduce((s, n) => s + windows.reduce(
  (c, [a, b]) => c + times[n].filter((t) => t > a && t <= b).length, 0), 0);
const seconds = windows.reduce((s, [a, b]) => s + (b - a), 0);
const delta = (k) => windows.reduce((s, [a, b]) => s + at(b, k) - at(a, k), 0);
const out = {
  mode, executors: names.length, decode_tokens: decodeTokens, decode_s: Number(seconds.toFixed(3)),
  aggregate_tok_s: Number((decodeTokens / seconds).toFixed(3)),
  bytes_per_token: Math.round(delta(1) / decodeTokens), lookups_per_token: Number((delta(2) / decodeTokens).toFixed(2)),
  hit_rate: Number((delta(3) / Math.max(1, delta(2))).toFixed(3)), samples: samples.length,
};
console.log(JSON.stringify(out));
