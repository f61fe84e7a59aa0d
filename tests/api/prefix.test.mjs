// Prefix sharing through the server: 8 requests that share a ~1000-token
// prefix, sent at once, prefill it once. usage.prompt_tokens_details.cached_tokens
// and /metrics' prefix-cache hit counter both show the other 7 reusing it.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { startServer, metric, STORIES } from './helpers.mjs';

let server, client;
before(async () => {
  server = await startServer(STORIES, ['-c', '2048', '--parallel', '8']);
  client = server.client();
});
after(async () => server && (await server.stop()));

async function tokenize(content) {
  const r = await fetch(`${server.url}/tokenize`, { method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify({ content, add_special: true }) });
  return (await r.json()).tokens;
}

// Deterministic varied text (a fixed linear congruential sequence over a word list).
function story(nWords) {
  const words = ['the', 'little', 'girl', 'saw', 'a', 'big', 'dog', 'in', 'park', 'and', 'she', 'was', 'happy', 'sun',
    'tree', 'bird', 'ran', 'to', 'her', 'mom', 'ball', 'red', 'played', 'with', 'friend', 'day', 'said', 'yes'];
  let x = 12345;
  const out = [];
  for (let i = 0; i < nWords; i++) {
    x = (x * 1103515245 + 12345) % 2147483648;
    out.push(words[x % words.length]);
  }
  return out.join(' ') + '.';
}

test('8 requests sharing a ~1000-token prefix prefill it once', async () => {
  const { data } = await client.models.list();
  const blockSize = data[0].meta.kv_block_size;
  assert.ok(blockSize > 0);
  const prefix = 'Once upon a time, ' + story(630);
  const prompts = Array.from({ length: 8 }, (_, i) => `${prefix}\nQuestion ${i + 1}: what did the ${['dog', 'girl', 'bird', 'mom', 'sun', 'tree', 'ball', 'friend'][i]} do?`);
  const ids = await Promise.all(prompts.map(tokenize));
  // Tokens every prompt has in common (the tokenization of the shared text).
  let common = 0;
  while (ids.every((t) => t[common] === ids[0][common])) common++;
  assert.ok(common >= 900 && common <= 1200, `shared prefix is ${common} tokens`);
  const sharedBlocksTokens = Math.floor(common / blockSize) * blockSize;

  const hitsBefore = await metric(server.url, 'spool_prefix_cache_hit_tokens_total');
  const results = await Promise.all(prompts.map((prompt) => client.completions.create({ prompt, max_tokens: 8, temperature: 0 })));
  const cached = results.map((r) => r.usage.prompt_tokens_details.cached_tokens);
  results.forEach((r, i) => assert.equal(r.usage.prompt_tokens, ids[i].length));
  // One request computes the shared blocks; the other 7 reuse every full one.
  const total = cached.reduce((a, b) => a + b, 0);
  assert.ok(total >= 7 * sharedBlocksTokens, `cached_tokens ${JSON.stringify(cached)}, shared ${sharedBlocksTokens}`);
  assert.equal(cached.filter((c) => c >= sharedBlocksTokens).length >= 7, true, JSON.stringify(cached));
  const hits = (await metric(server.url, 'spool_prefix_cache_hit_tokens_total')) - hitsBefore;
  assert.equal(hits, total);
  // The answers are what the prompts give on a fresh server (the first with nothing cached).
  const fresh = await startServer(STORIES, ['-c', '2048', '--parallel', '1']);
  try {
    const c = fresh.client();
    for (const i of [0, 5]) {
      const alone = await c.completions.create({ prompt: prompts[i], max_tokens: 8, temperature: 0 });
      if (i === 0) assert.equal(alone.usage.prompt_tokens_details.cached_tokens, 0);
      assert.equal(results[i].choices[0].text, alone.choices[0].text, `prompt ${i}`);
    }
  } finally {
    await fresh.stop();
  }
});
