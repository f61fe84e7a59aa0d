// The UI on a server with --api-key, in a real browser: the page shell loads
// without the key but shows nothing but the key prompt; a wrong key is
// refused; with the right one the data appears, every API call carries it in
// the Authorization header (a pipeline's SSE stream included), it is kept in
// session storage (never in the URL) and "Forget key" drops it.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { launch, openPage, ready, startServer, STORIES } from './browser.mjs';

const KEY = 'ui-test-key-6b1f';
let server, browser;
before(async () => {
  [server, browser] = await Promise.all([startServer(STORIES, ['--api-key', KEY]), launch()]);
});
after(async () => {
  await browser?.close();
  await server?.stop();
});

test('the shell loads without the key; data routes, /v1/stats included, need it', async () => {
  for (const route of ['/', '/ui/app.js', '/ui/vendor/marked.esm.js']) assert.equal((await fetch(server.url + route)).status, 200, route);
  for (const route of ['/v1/stats', '/v1/models', '/v1/pipelines', '/metrics']) {
    assert.equal((await fetch(server.url + route)).status, 401, route);
    const ok = await fetch(server.url + route, { headers: { Authorization: `Bearer ${KEY}` } });
    assert.equal(ok.status, 200, route);
  }
});

test('with a key set, the UI shows no data until the key is entered', async () => {
  const page = await openPage(browser, `${server.url}/#/engine`);
  await page.waitForSelector('#login:not([hidden])', { timeout: 10000 });
  const locked = await page.evaluate(() => ({
    pages: [...document.querySelectorAll('.page')].filter((p) => !p.hidden).length,
    nav: document.querySelector('#nav').hidden,
    text: document.body.innerText,
    ready: document.body.dataset.ready,
  }));
  assert.equal(locked.pages, 0);
  assert.equal(locked.nav, true);
  assert.equal(locked.ready, undefined);
  assert.ok(!locked.text.includes(server.modelId), 'no model name before the key');
  // The key is asked for; data routes were refused, so nothing else was loaded.
  const dataCalls = page.requests.filter((r) => new URL(r.url).pathname.startsWith('/v1/'));
  assert.deepEqual(dataCalls.map((r) => new URL(r.url).pathname), ['/v1/models']);

  await page.type('#login-key', 'wrong-key');
  await page.keyboard.press('Enter');
  await page.waitForFunction(() => document.querySelector('#login-error').textContent.includes('refused'));
  assert.equal(await page.evaluate(() => sessionStorage.getItem('spool.apiKey')), null);

  await page.type('#login-key', KEY);
  await page.keyboard.press('Enter');
  await ready(page);
  await page.waitForFunction(() => Number(document.querySelector('#page-engine').dataset.polls ?? 0) >= 1, { timeout: 10000 });
  assert.equal(await page.$eval('#page-engine', (el) => el.hidden), false);
  assert.equal(await page.evaluate(() => sessionStorage.getItem('spool.apiKey')), KEY);
  assert.ok(!page.url().includes(KEY));
  const after = page.requests.slice(page.requests.findIndex((r) => r.headers.authorization === `Bearer ${KEY}`));
  const apiCalls = after.filter((r) => new URL(r.url).pathname.startsWith('/v1/'));
  assert.ok(apiCalls.some((r) => r.url.endsWith('/v1/stats')));
  for (const r of apiCalls) assert.equal(r.headers.authorization, `Bearer ${KEY}`, r.url);
  assert.ok(page.requests.every((r) => !r.url.includes(KEY)), 'the key is never in a URL');

  // Another page of the same tab session: still in, without asking.
  await page.goto(`${server.url}/#/chat`);
  await page.reload();
  await ready(page);
  assert.ok((await page.$$eval('#chat-model option', (os) => os.map((o) => o.value))).includes(server.modelId));

  // A pipeline's live events (SSE read through fetch, so the key goes in the header) with the key.
  await page.click('#nav a[data-page="pipelines"]');
  await page.waitForSelector('#page-pipelines:not([hidden])');
  await page.click('#run-start');
  await page.waitForSelector('#run-graph[data-ended="1"]', { timeout: 30000 });
  assert.equal(await page.$eval('#run-title', (el) => el.dataset.status), 'completed');
  const events = page.requests.filter((r) => /\/v1\/pipelines\/run_\w+\/events/.test(r.url));
  assert.equal(events.length, 1);
  assert.equal(events[0].headers.authorization, `Bearer ${KEY}`);
  assert.ok(page.requests.every((r) => !r.url.includes(KEY)), 'the key is never in a URL');

  await page.click('#logout');
  await page.waitForSelector('#login:not([hidden])');
  assert.equal(await page.evaluate(() => sessionStorage.getItem('spool.apiKey')), null);
  assert.equal(await page.$$eval('.page:not([hidden])', (els) => els.length), 0);
  // Only the expected 401s were logged (the first /v1/models and the wrong key's).
  assert.deepEqual(page.problems.filter((p) => !p.includes('401')), []);
});
