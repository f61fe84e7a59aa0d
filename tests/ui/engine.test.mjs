// The engine page in a real browser against a real `spool serve`: while
// streamed requests run, its charts (fed by GET /v1/stats) show non-zero
// throughput, running requests, KV blocks and time to first token.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { launch, openPage, ready, screenshot, startServer, STORIES } from './browser.mjs';

let server, browser;
before(async () => {
  [server, browser] = await Promise.all([startServer(STORIES, ['-c', '2048', '--parallel', '4']), launch()]);
});
after(async () => {
  await browser?.close();
  await server?.stop();
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
  assert.equal(mode, 'weights resident (no streaming figures)');
  assert.equal(await page.$eval('#engine-streaming', (el) => el.hidden), true);
  assert.deepEqual(page.problems, []);
});
