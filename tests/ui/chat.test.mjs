// The chat page in a real browser against a real `spool serve` (stories260K,
// no chat template, so the page uses /v1/completions with the typed text as
// the prompt): a reply streams and equals `spool run` at temperature 0, Stop
// ends a reply early (and the server stops generating it), regenerate, and
// model output holding HTML renders as text and runs nothing; a second model
// with a chat template, picked in the page, answers through
// /v1/chat/completions as `spool run --chat` does.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import {
  launch, openPage, ready, fill, screenshot, squash, stats, startServer, runSpool, qwen2TinyWithTemplate, STORIES,
} from './browser.mjs';

let server, browser;
before(async () => {
  [server, browser] = await Promise.all([startServer(STORIES, ['-c', '4096', '--parallel', '4']), launch()]);
});
after(async () => {
  await browser?.close();
  await server?.stop();
});

const lastReply = (page) => page.$eval('#chat-messages .msg.assistant:last-of-type', (el) => ({
  text: el.querySelector('.body').innerText,
  chunks: Number(el.dataset.chunks ?? 0),
  finish: el.dataset.finish,
  stats: el.querySelector('.stats').textContent,
}));
const stored = (page) => page.evaluate(() => JSON.parse(localStorage.getItem('spool.chats')));

test('a reply streams and equals spool run at temperature 0; Copy copies it, Regenerate gives it again', async () => {
  const page = await openPage(browser, `${server.url}/#/chat`);
  const streamed = [];
  page.on('response', (r) => {
    if (r.url().endsWith('/v1/completions')) streamed.push(r.headers()['content-type']);
  });
  await ready(page);
  await fill(page, '#chat-temperature', '0');
  await fill(page, '#chat-max-tokens', '40');
  await page.type('#chat-input', 'Once upon a time');
  await page.keyboard.press('Enter');
  await page.waitForSelector('#chat-messages .msg.assistant[data-finish]', { timeout: 20000 });
  const ref = await runSpool(['run', '-m', STORIES, '-p', 'Once upon a time', '-n', '40', '--temp', '0', '-t', '1']);
  assert.equal(ref.code, 0, ref.stderr);
  const reply = await lastReply(page);
  const conv = (await stored(page))[0];
  assert.equal(conv.messages[0].content, 'Once upon a time');
  assert.equal(conv.messages[1].content, ref.stdout, 'the reply kept in the browser is exactly spool run\'s text');
  assert.equal(squash(reply.text), squash(ref.stdout), 'the reply shown is spool run\'s text');
  assert.ok(reply.chunks > 1, `streamed in ${reply.chunks} chunks`);
  assert.deepEqual(streamed, ['text/event-stream']);
  const m = /^(\d+) tokens · ([\d.]+) tok\/s · first token \d+ ms · prompt (\d+)/.exec(reply.stats);
  assert.ok(m, reply.stats);
  assert.ok(Number(m[1]) > 1 && Number(m[1]) <= 40 && Number(m[2]) > 0 && Number(m[3]) > 0, reply.stats);
  await screenshot(page, 'chat.png');

  await page.browserContext().overridePermissions(server.url, ['clipboard-read', 'clipboard-write', 'clipboard-sanitized-write']);
  await page.click('#chat-messages .msg.assistant .copy');
  await page.waitForFunction(() => document.querySelector('#chat-messages .msg.assistant .copy').textContent === 'copied');
  assert.equal(await page.evaluate(() => navigator.clipboard.readText()), ref.stdout, 'Copy puts the reply on the clipboard');

  await page.click('#chat-messages .msg.assistant .regenerate');
  await page.waitForFunction(() => {
    const c = JSON.parse(localStorage.getItem('spool.chats'))[0];
    return c.messages.length === 2 && c.messages[1].stats;
  }, { timeout: 20000 });
  assert.equal((await stored(page))[0].messages[1].content, ref.stdout);
  assert.deepEqual(page.problems, []);
});

test('Stop ends a reply early and the server stops generating it', async () => {
  const page = await openPage(browser, `${server.url}/#/chat`);
  await ready(page);
  await fill(page, '#chat-temperature', '0');
  await fill(page, '#chat-max-tokens', '4000');
  await page.click('#chat-ignore-eos');
  const before = (await stats(server.url)).models[0].engine;
  await page.type('#chat-input', 'Once upon a time');
  await page.keyboard.press('Enter');
  await page.waitForSelector('#chat-messages .msg.assistant.streaming[data-chunks]', { timeout: 20000 });
  await page.click('#chat-stop');
  await page.waitForSelector('#chat-messages .msg.assistant[data-finish="stopped"]', { timeout: 5000 });
  const reply = await lastReply(page);
  assert.match(reply.stats, /^~\d+ tokens.* · stopped$/);
  // The server cancels the request when the connection closes: nothing runs, far fewer than 4000 tokens were made.
  let after;
  for (let i = 0; i < 50; ++i) {
    after = (await stats(server.url)).models[0].engine;
    if (after.running === 0 && after.requests_finished > before.requests_finished) break;
    await new Promise((r) => setTimeout(r, 100));
  }
  assert.equal(after.running, 0);
  const made = after.generated_tokens - before.generated_tokens;
  assert.ok(made < 4000, `the server generated ${made} tokens of 4000`);
  assert.ok(reply.chunks <= made, `${reply.chunks} chunks shown, ${made} generated`);
  assert.equal(await page.$eval('#chat-stop', (b) => b.hidden), true);
  assert.deepEqual(page.problems, []);
});

test('model output with <script> and <img onerror> renders as text and runs nothing', async () => {
  // stories260K cannot be made to write HTML, so the output is put where the page keeps replies (localStorage)
  // and the page restores it: the same function (markdown.js setMarkdown) draws restored and streamed replies.
  const evil = [
    'Look: <script>window.__xss = 1</script> and <img src=x onerror="window.__xss = 2"> here.',
    '',
    '<iframe src="https://example.com/"></iframe>',
    '',
    '[a link](javascript:window.__xss=3) **bold** ![tracker](https://example.com/t.png)',
    '',
    '```js',
    'const x = "<b>code</b>";',
    '```',
  ].join('\n');
  const page = await openPage(browser, `${server.url}/#/chat`);
  await ready(page);
  await page.evaluate((content) => {
    localStorage.setItem('spool.chats', JSON.stringify([{
      id: 'evil', title: 'evil', model: '', system: '',
      settings: { temperature: 0, top_p: 1, max_tokens: 16, seed: '', ignore_eos: false },
      messages: [{ role: 'user', content: 'hi <img src=x onerror="window.__xss = 5">' }, { role: 'assistant', content }],
    }]));
  }, evil);
  await page.reload();
  await ready(page);
  const body = await page.$eval('#chat-messages .msg.assistant .body', (el) => ({
    text: el.innerText,
    scripts: document.querySelectorAll('#chat-messages script, #chat-messages img, #chat-messages iframe').length,
    handlers: document.querySelectorAll('[onerror], [onload], [onclick]').length,
    hrefs: [...el.querySelectorAll('a')].map((a) => a.getAttribute('href')),
    strong: el.querySelector('strong')?.textContent,
    code: el.querySelector('pre code')?.textContent,
  }));
  assert.ok(body.text.includes('<script>window.__xss = 1</script>'), body.text);
  assert.ok(body.text.includes('<img src=x onerror="window.__xss = 2">'), body.text);
  assert.ok(body.text.includes('<iframe src="https://example.com/"></iframe>'), body.text);
  assert.equal(body.scripts, 0);
  assert.equal(body.handlers, 0);
  assert.equal(body.strong, 'bold', 'markdown still renders');
  assert.equal(body.code, 'const x = "<b>code</b>";\n');
  assert.ok(body.hrefs.every((h) => h === null || /^https:\/\/example\.com\//.test(h)), JSON.stringify(body.hrefs));
  for (const a of await page.$$('#chat-messages .msg.assistant .body a:not([href])')) await a.click();
  const user = await page.$eval('#chat-messages .msg.user', (el) => el.textContent);
  assert.equal(user, 'hi <img src=x onerror="window.__xss = 5">');
  await new Promise((r) => setTimeout(r, 200));
  assert.equal(await page.evaluate(() => window.__xss), undefined, 'no injected script ran');
  const remote = page.requests.filter((r) => !r.url.startsWith(server.url));
  assert.deepEqual(remote.map((r) => r.url), [], 'nothing was fetched from elsewhere');
  assert.deepEqual(page.problems, []);
});

test('a model with a chat template, picked in the page, answers as spool run --chat', async () => {
  const qwen = qwen2TinyWithTemplate();
  const two = await startServer(`stories=${STORIES}`, ['-m', `qwen=${qwen.dir}`]);
  try {
    const page = await openPage(browser, `${two.url}/#/chat`);
    const routes = [];
    page.on('response', (r) => {
      if (r.request().method() === 'POST') routes.push(new URL(r.url()).pathname);
    });
    await ready(page);
    assert.deepEqual(await page.$$eval('#chat-model option', (os) => os.map((o) => o.value)), ['stories', 'qwen']);
    await page.select('#chat-model', 'qwen');
    assert.match(await page.$eval('#chat-mode', (el) => el.textContent), /^qwen: the model's chat template/);
    await fill(page, '#chat-temperature', '0');
    await fill(page, '#chat-max-tokens', '16');
    await page.type('#chat-input', 'Hello');
    await page.keyboard.press('Enter');
    await page.waitForSelector('#chat-messages .msg.assistant[data-finish]', { timeout: 20000 });
    const ref = await runSpool(['run', '-m', qwen.dir, '--chat', '-p', 'Hello', '-n', '16', '--temp', '0', '-t', '1']);
    assert.equal(ref.code, 0, ref.stderr);
    const conv = (await stored(page))[0];
    assert.equal(conv.model, 'qwen');
    assert.equal(conv.messages[1].content, ref.stdout);
    assert.ok(conv.messages[1].stats.prompt_tokens > 10, 'the template was applied');
    assert.deepEqual(routes, ['/v1/chat/completions']);
    assert.deepEqual(page.problems, []);
  } finally {
    await two.stop();
    qwen.remove();
  }
});
