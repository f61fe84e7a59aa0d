// Load generator for bench/serve_compare.sh: fires N concurrent streamed
// /v1/completions requests (distinct short prompts, fixed max_tokens,
// ignore_eos, greedy) at an OpenAI-compatible server and prints one JSON line:
//   tok_per_s         completion tokens of all requests / wall time (end to end,
//                     prompt processing and time to first token included)
//   decode_tok_per_s  sum over requests of (completion tokens - 1) / (time of
//                     the last token - time of the first token): aggregate
//                     decode throughput while the requests run side by side
//   ttft_s            median time to the first token
// Token counts come from the final chunk's usage (stream_options.include_usage);
// a server that sends none is counted by content chunks. Plain fetch, no npm
// dependencies, so it measures any server the same way.
// SERVE_LOAD_EXTRA (a JSON object) is merged into every request body, e.g. a
// json_schema for bench/structured_compare.sh; a constrained request does not
// set ignore_eos (the grammar ends it).
// usage: node bench/serve_load.mjs URL CONCURRENCY MAX_TOKENS [WAVES]
const [url, concurrencyArg, maxTokensArg, wavesArg] = process.argv.slice(2);
if (!url || !concurrencyArg || !maxTokensArg) {
  console.error('usage: node bench/serve_load.mjs URL CONCURRENCY MAX_TOKENS [WAVES]');
  process.exit(2);
}
const concurrency = Number(concurrencyArg);
const maxTokens = Number(maxTokensArg);
const waves = Number(wavesArg ?? 1);
const extra = process.env.SERVE_LOAD_EXTRA ? JSON.parse(process.env.SERVE_LOAD_EXTRA) : {};
const constrained = 'json_schema' in extra || 'grammar' in extra || 'response_format' in extra;
const errors = [];
const subjects = ['a dog', 'a cat', 'the sea', 'a king', 'the moon', 'a robot', 'a tree', 'a city'];

async function one(i) {
  const start = performance.now();
  const res = await fetch(`${url}/v1/completions`, {
    method: 'POST',
    headers: { 'Content-Type': 'application/json' },
    body: JSON.stringify({
      prompt: `Write a story about ${subjects[i % subjects.length]} (${i}):`,
      max_tokens: maxTokens,
      temperature: 0,
      ignore_eos: !constrained,
      stream: true,
      stream_options: { include_usage: true },
      ...extra,
    }),
  });
  if (res.status !== 200) throw new Error(`HTTP ${res.status}: ${await res.text()}`);
  const decoder = new TextDecoder();
  let buffer = '', first = 0, last = 0, chunks = 0, usage = null;
  for await (const bytes of res.body) {
    buffer += decoder.decode(bytes, { stream: true });
    let nl;
    while ((nl = buffer.indexOf('\n')) >= 0) {
      const line = buffer.slice(0, nl).trim();
      buffer = buffer.slice(nl + 1);
      if (!line.startsWith('data:')) continue;
      const data = line.slice(5).trim();
      if (data === '[DONE]') continue;
      const msg = JSON.parse(data);
      if (msg.error) {
        // llama-server may fail a stream after its tokens (its output parser rejects some
        // random-weight text); count the request's tokens so far and report the error.
        if (!process.env.SERVE_LOAD_TOLERATE_ERRORS) throw new Error(`stream error: ${JSON.stringify(msg.error)}`);
        errors.push(msg.error.message);
        continue;
      }
      if (msg.usage) usage = msg.usage;
      if (msg.choices?.length && (msg.choices[0].text ?? '') !== '') {
        const now = performance.now();
        if (!first) first = now;
        last = now;
        ++chunks;
      }
    }
  }
  const tokens = usage?.completion_tokens ?? chunks;
  return { tokens, ttft: (first - start) / 1000, decode: last > first ? (tokens - 1) / ((last - first) / 1000) : 0 };
}

let tokens = 0, decode = 0;
const ttfts = [];
const t0 = performance.now();
for (let w = 0; w < waves; w++) {
  const results = await Promise.all(Array.from({ length: concurrency }, (_, i) => one(w * concurrency + i)));
  for (const r of results) {
    tokens += r.tokens;
    decode += r.decode / waves;
    ttfts.push(r.ttft);
  }
}
const seconds = (performance.now() - t0) / 1000;
ttfts.sort((a, b) => a - b);
console.log(JSON.stringify({
  concurrency, max_tokens: maxTokens, waves, tokens, seconds, tok_per_s: tokens / seconds,
  decode_tok_per_s: decode, ttft_s: ttfts[Math.floor(ttfts.length / 2)], errors,
}));
