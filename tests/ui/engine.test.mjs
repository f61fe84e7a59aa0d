// The engine page in a real browser against a real `spool serve`: while
// streamed requests run, its charts (fed by GET /v1/stats) show non-zero
// throughput, running requests, KV blocks and time to first token; with
// --mem-budget (weights streamed) the streaming charts show bytes read, per
// token, the weight cache, memory against the budget and reads per layer; the
// KV disk tier's tiles show what it wrote.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { launch, openPage, ready, screenshot, startServer, STORIES } from './browser.mjs';

let server, streamed, browser;
before(async () => {
  [server, streamed, browser] = await Promise.all([
    startServer(STORIES, ['-c', '2048', '--parallel', '4', '-md', STORIES]),  // the model as its own draft model
    startServer(STORIES, ['--mem-budget', '64M']),  // 0.4 MiB left for 1.2 MiB of weights: they stream
    launch(),
  ]);
});
after(async () => {
  await browser?.close();
  await server?.stop();
  await streamed?.stop();
});

// Streamed completions, `workers` at a time, until stop() is called.
function load(url, workers) {
  let running = true;
  const one = async (i) => {
    while (running) {
      const res = await fetch(`${url}/v1/completions`, {
        method: 'POST',
        headers: { 'Content-Type': 'application/json' },
        body: JSON.stringify({ prompt: `Once upon a time ${i}`, max_tokens: 600, ignore_eos: true, stream: true, temperature: 0.8 }),
      });
      await res.text();
    }
  };
  const done = Promise.all(Array.from({ length: workers }, (_, i) => one(i)));
  return { stop: () => { running = false; return done; } };
}

const chartMax = (page, id) => page.$eval(`.chart[data-chart="${id}"]`, (el) => JSON.parse(el.dataset.max ?? '[]'));

test('engine charts show non-zero figures while requests stream', async () => {
  const page = await openPage(browser, `${server.url}/#/engine`);
  await ready(page);
  await page.waitForFunction(() => document.querySelector('#engine-mode').textContent !== '');
  const mode = await page.$eval('#engine-mode', (el) => el.textContent);
  const gen = load(server.url, 3);
  try {
    await page.waitForFunction(() => {
      const max = (id) => JSON.parse(document.querySelector(`.chart[data-chart="${id}"]`).dataset.max ?? '[0]');
      return max('throughput')[0] > 0 && max('throughput')[1] > 0 && max('requests')[0] > 0 && max('kv')[0] > 0 && max('ttft')[0] > 0;
    }, { timeout: 20000, polling: 200 });
    // A few more seconds of history for the screenshot.
    await page.waitForFunction(() => Number(document.querySelector('#page-engine').dataset.polls) >= 6, { timeout: 20000 });
    const running = await page.$eval('#engine-tiles [data-key="running"] .value', (el) => el.textContent);
    await screenshot(page, 'engine.png');
    assert.match(running, /^[1-9]\d* \/ \d+$/, 'requests running when the screenshot was taken');
  } finally {
    await gen.stop();
  }
  const [decode, prompt] = await chartMax(page, 'throughput');
  const [kvUsed, , kvTotal] = await chartMax(page, 'kv');
  const [ttft] = await chartMax(page, 'ttft');
  assert.ok(decode > 0 && prompt > 0, `decode ${decode}, prompt ${prompt} tok/s`);
  assert.ok(kvUsed > 0 && kvTotal >= kvUsed, `kv used ${kvUsed} of ${kvTotal}`);
  assert.ok(ttft > 0 && ttft < 30, `ttft ${ttft} s`);
  const tiles = await page.$$eval('#engine-tiles .tile', (els) => Object.fromEntries(els.map((el) => [el.dataset.key, el.querySelector('.value').textContent])));
  assert.notEqual(tiles.generated, '0');
  assert.match(tiles.rss, /MiB|GiB/);
  // The KV disk tier (on by default) wrote the streamed requests' full blocks.
  assert.match(tiles['kv-disk-bytes'] ?? '', /^\d+(\.\d)? [KMG]?i?B \/ \d+(\.\d)? [KMG]iB$/);
  assert.match(tiles['kv-disk-hits'] ?? '', /^\d/);
  // Speculative decoding (--spec auto by default): its counters and the governor's state.
  assert.match(tiles.spec ?? '', /^\d+(\.\d+)?k? \/ \d+(\.\d+)?k?( \(\d+(\.\d)? ?%\))?$/);
  assert.match(tiles['spec-governor'] ?? '', /^\d+(\.\d)? ?%, \d+ seq, (–|\d+\.\d\d×)$/);
  assert.match(tiles['spec-model'] ?? '', /^\d+(\.\d+)?k? \/ \d+(\.\d+)?k?, \d+\.\d s$/);
  assert.equal(mode, 'weights resident (no streaming figures)');
  assert.equal(await page.$eval('#engine-streaming', (el) => el.hidden), true);
  assert.deepEqual(page.problems, []);
});

test('with --mem-budget the streaming charts show reads, the cache and memory against the budget', async () => {
  const page = await openPage(browser, `${streamed.url}/#/engine`);
  await ready(page);
  await page.waitForSelector('#engine-streaming:not([hidden])', { timeout: 10000 });
  const gen = load(streamed.url, 2);
  try {
    await page.waitForFunction(() => {
      const max = (id) => JSON.parse(document.querySelector(`.chart[data-chart="${id}"]`).dataset.max ?? '[0]');
      return max('w-read')[0] > 0 && max('w-per-token')[0] > 0 && max('throughput')[0] > 0 &&
        document.querySelectorAll('#engine-layers .bar').length > 0 &&
        Number(document.querySelector('#page-engine').dataset.polls) >= 5;
    }, { timeout: 30000, polling: 200 });
    await screenshot(page, 'engine-streaming.png', { fullPage: true });
  } finally {
    await gen.stop();
  }
  const [rss, budget, arena] = await chartMax(page, 'w-mem');
  assert.equal(budget, 64 * 1024 * 1024);
  assert.ok(rss > 0 && arena > 0, `rss ${rss}, arena ${arena}`);
  assert.ok((await chartMax(page, 'w-read'))[0] > 0);
  const [hit] = await chartMax(page, 'w-hit');
  assert.ok(hit >= 0 && hit <= 1, `hit rate ${hit}`);
  const bars = await page.$$eval('#engine-layers .bar', (els) => els.map((el) => Number(el.dataset.value)));
  assert.equal(bars.length, 6, 'five layers and the tensors outside them');
  assert.ok(bars.slice(0, 5).every((v) => v > 0), `units read per layer per token: ${bars.join()}`);
  // Storage read time per layer: every layer's weights were read during the streamed run.
  const readTimes = await page.$$eval('#engine-layer-read .bar', (els) => els.map((el) => Number(el.dataset.value)));
  assert.equal(readTimes.length, 6, 'five layers and the tensors outside them');
  assert.ok(readTimes.slice(0, 5).every((v) => v > 0), `read time per layer per token: ${readTimes.join()}`);
  const waits = await page.$$eval('#engine-layer-wait .bar', (els) => els.map((el) => Number(el.dataset.value)));
  assert.equal(waits.length, 6);
  assert.ok(waits.every((v) => v >= 0) && waits.some((v) => v > 0), `wait per layer per token: ${waits.join()}`);
  assert.match(await page.$eval('#engine-mode', (el) => el.textContent), /stream/);
  assert.match(await page.$eval('#engine-tiles [data-key="w-budget"] .value', (el) => el.textContent), / \/ 64\.0 MiB$/);
  assert.deepEqual(page.problems, []);
});
