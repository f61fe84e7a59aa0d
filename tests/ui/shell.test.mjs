// The UI shell served from the binary: content types, caching (ETag, 304),
// the Content-Security-Policy, every file the page loads, first-load time in
// a fresh browser (printed as a test diagnostic; docs/UI.md quotes it), the
// theme toggle and a phone-sized layout.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { launch, openPage, ready, screenshot, startServer, STORIES } from './browser.mjs';

let server, browser;
before(async () => {
  [server, browser] = await Promise.all([startServer(STORIES), launch()]);
});
after(async () => {
  await browser?.close();
  await server?.stop();
});

test('files are served with their type, an ETag, and a CSP on the page', async () => {
  const page = await fetch(`${server.url}/`);
  assert.equal(page.status, 200);
  assert.equal(page.headers.get('content-type'), 'text/html; charset=utf-8');
  const csp = page.headers.get('content-security-policy');
  assert.match(csp, /script-src 'self'/);
  assert.match(csp, /default-src 'none'/);
  assert.match(csp, /connect-src 'self'/);
  assert.equal(page.headers.get('cache-control'), 'no-cache');
  const html = await page.text();
  const refs = [...html.matchAll(/(?:src|href)="(\/ui\/[^"]+)"/g)].map((m) => m[1]);
  assert.ok(refs.length >= 5, refs.join());
  for (const ref of refs) {
    const r = await fetch(server.url + ref);
    assert.equal(r.status, 200, ref);
    const type = r.headers.get('content-type');
    if (ref.endsWith('.js')) assert.equal(type, 'text/javascript; charset=utf-8', ref);
    if (ref.endsWith('.css')) assert.equal(type, 'text/css; charset=utf-8', ref);
    assert.equal(r.headers.get('x-content-type-options'), 'nosniff');
    const etag = r.headers.get('etag');
    assert.match(etag, /^"[0-9a-f]{16}(-gz)?"$/);
    const again = await fetch(server.url + ref, { headers: { 'If-None-Match': etag } });
    assert.equal(again.status, 304, ref);
  }
  // Scripts go out gzipped (compressed at build time) to clients that take it, as they are to others.
  const gz = await fetch(`${server.url}/ui/vendor/marked.esm.js`, { headers: { 'Accept-Encoding': 'gzip' } });
  assert.equal(gz.headers.get('content-encoding'), 'gzip');
  const plain = await fetch(`${server.url}/ui/vendor/marked.esm.js`, { headers: { 'Accept-Encoding': 'identity' } });
  assert.equal(plain.headers.get('content-encoding'), null);
  assert.equal(await gz.text(), await plain.text());
  const missing = await fetch(`${server.url}/ui/nope.js`);
  assert.equal(missing.status, 404);
  assert.equal((await missing.json()).error.code, 'not_found');
  const licence = await fetch(`${server.url}/ui/vendor/LICENSE.dompurify`);
  assert.equal(licence.status, 200, 'the vendored licences ship with the binary');
});

test('first load in a fresh browser; theme toggle; phone-sized layout', async (t) => {
  const page = await openPage(browser, `${server.url}/`);
  await ready(page);
  const timing = await page.evaluate(() => {
    const nav = performance.getEntriesByType('navigation')[0];
    const res = performance.getEntriesByType('resource');
    return {
      dcl: nav.domContentLoadedEventEnd,
      load: nav.loadEventEnd,
      ready: Number(document.body.dataset.readyMs),
      bytes: nav.transferSize + res.reduce((s, r) => s + r.transferSize, 0),
      files: res.length + 1,
    };
  });
  t.diagnostic(`first load: DOMContentLoaded ${timing.dcl.toFixed(0)} ms, load ${timing.load.toFixed(0)} ms, ` +
    `UI ready (models listed, chat drawn) ${timing.ready} ms; ${timing.files} requests, ${timing.bytes} bytes`);
  assert.ok(timing.ready > 0 && timing.ready < 10000, JSON.stringify(timing));

  const theme = await page.evaluate(() => document.documentElement.dataset.theme);
  await page.click('#theme-toggle');
  const toggled = await page.evaluate(() => ({ theme: document.documentElement.dataset.theme, bg: getComputedStyle(document.body).backgroundColor }));
  assert.notEqual(toggled.theme, theme);
  assert.equal(toggled.theme === 'dark', toggled.bg === 'rgb(21, 23, 26)');

  // Keyboard: Alt+2 / Alt+3 switch pages.
  await page.keyboard.down('Alt');
  await page.keyboard.press('3');
  await page.keyboard.up('Alt');
  await page.waitForFunction(() => !document.querySelector('#page-engine').hidden);

  const phone = await openPage(browser, `${server.url}/#/chat`, { width: 390, height: 780 });
  await ready(phone);
  assert.equal(await phone.$eval('#chat-settings', (d) => d.open), false, 'settings folded on a phone');
  await phone.type('#chat-input', 'Once upon a time');
  await phone.keyboard.press('Enter');
  await phone.waitForSelector('#chat-messages .msg.assistant[data-finish]', { timeout: 20000 });
  const overflow = await phone.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
  assert.ok(overflow <= 0, `the chat page is ${overflow} px wider than a phone screen`);
  await screenshot(phone, 'chat-phone.png');
  assert.deepEqual(page.problems, []);
  assert.deepEqual(phone.problems, []);
});
