// Load generator for bench/serve_compare.sh: fires N concurrent
// /v1/completions requests (distinct short prompts, fixed max_tokens,
// ignore_eos, greedy) at an OpenAI-compatible server and prints one JSON line:
// completion tokens, wall seconds and aggregate tokens/s. Plain fetch, no
// npm dependencies, so it measures any server the same way.
// usage: node bench/serve_load.mjs URL CONCURRENCY MAX_TOKENS [WAVES]
const [url, concurrencyArg, maxTokensArg, wavesArg] = process.argv.slice(2);
if (!url || !concurrencyArg || !maxTokensArg) {
  console.error('usage: node bench/serve_load.mjs URL CONCURRENCY MAX_TOKENS [WAVES]');
  process.exit(2);
}
const concurrency = Number(concurrencyArg);
const maxTokens = Number(maxTokensArg);
const waves = Number(wavesArg ?? 1);
const subjects = ['a dog', 'a cat', 'the sea', 'a king', 'the moon', 'a robot', 'a tree', 'a city'];

async function one(i) {
  const res = await fetch(`${url}/v1/completions`, {
    method: 'POST',
    headers: { 'Content-Type': 'application/json' },
    body: JSON.stringify({
      prompt: `Write a story about ${subjects[i % subjects.length]} (${i}):`,
      max_tokens: maxTokens,
      temperature: 0,
      ignore_eos: true,
    }),
  });
  const body = await res.json();
  if (res.status !== 200) throw new Error(`HTTP ${res.status}: ${JSON.stringify(body)}`);
  return body.usage.completion_tokens;
}

let tokens = 0;
const t0 = performance.now();
for (let w = 0; w < waves; w++) {
  const counts = await Promise.all(Array.from({ length: concurrency }, (_, i) => one(w * concurrency + i)));
  tokens += counts.reduce((a, b) => a + b, 0);
}
const seconds = (performance.now() - t0) / 1000;
console.log(JSON.stringify({ concurrency, max_tokens: maxTokens, waves, tokens, seconds, tok_per_s: tokens / seconds }));
