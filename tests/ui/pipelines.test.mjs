// The pipelines page in a real browser against a real `spool serve`: faults in
// the spec editor are marked on their line (a JSON syntax error found in the
// page, a validation error from the server located by its `param`), and the
// example three-agent pipeline runs live: every node ends done with its
// output, which is the server's stored output, and the run's log is shown; a
// retried agent shows its second attempt; a running pipeline is cancelled.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { launch, openPage, ready, screenshot, squash, startServer, STORIES } from './browser.mjs';

let server, browser;
before(async () => {
  // The first attempt of every step of agent "flaky" fails (the retry test).
  [server, browser] = await Promise.all([
    startServer(STORIES, ['--parallel', '4'], { env: { SPOOL_FAILPOINTS: 'agent:flaky:1' } }), launch()]);
});
after(async () => {
  await browser?.close();
  await server?.stop();
});

const setSpec = (page, text) => page.$eval('#spec-text', (ta, t) => {
  ta.value = t;
  ta.dispatchEvent(new Event('input'));
}, text);
const fault = (page) => page.$eval('#spec-error', (el) => ({
  text: el.textContent,
  badLine: Number(document.querySelector('#spec-gutter .bad')?.textContent ?? 0),
}));

test('spec faults are shown on their line', async () => {
  const page = await openPage(browser, `${server.url}/#/pipelines`);
  await ready(page);
  // A missing comma at the end of line 2.
  await setSpec(page, '{\n  "task": "x"\n  "agents": []\n}');
  await page.click('#run-start');
  let f = await fault(page);
  assert.equal(f.text, "line 2, column 14: invalid JSON: expected ',' or '}' here, before '\"'");
  assert.equal(f.badLine, 2);
  // Valid JSON the server refuses: agents[1] names an agent that does not exist.
  const spec = {
    task: 'Once upon a time',
    agents: [
      { name: 'a', prompt: '{task}' },
      { name: 'b', prompt: '{agents.nobody.output}' },
    ],
  };
  const text = JSON.stringify(spec, null, 2);
  await setSpec(page, text);
  await page.click('#run-start');
  await page.waitForFunction(() => document.querySelector('#spec-error').textContent.includes('agents[1]'), { timeout: 5000 });
  f = await fault(page);
  const promptLine = text.split('\n').findIndex((l) => l.includes('"prompt": "{agents.nobody.output}"')) + 1;
  assert.match(f.text, /^line \d+, column \d+: invalid pipeline spec: .*nobody.* \(agents\[1\]\.prompt\)$/);
  assert.equal(f.badLine, promptLine);
  const runs = await (await fetch(`${server.url}/v1/pipelines`)).json();
  assert.equal(runs.data.length, 0, 'nothing was run');
  assert.deepEqual(page.problems.filter((p) => !p.includes('400')), []);
});

test('a three-agent pipeline runs live; every node ends done with its output', async () => {
  const page = await openPage(browser, `${server.url}/#/pipelines`);
  await ready(page);
  const tokenEvents = [];
  page.on('response', (r) => {
    if (r.url().includes('/events')) tokenEvents.push(r.headers()['content-type']);
  });
  await page.click('#spec-load');  // the built-in example
  await page.type('#spec-name', 'three-agents');
  await page.click('#spec-save');
  await page.waitForFunction(() => [...document.querySelectorAll('#spec-saved option')].some((o) => o.value === 'three-agents'));
  await page.click('#run-start');
  await page.waitForSelector('#run-graph[data-ended="1"]', { timeout: 60000 });
  const title = await page.$eval('#run-title', (el) => ({ text: el.textContent, status: el.dataset.status }));
  assert.equal(title.status, 'completed');
  const id = /Run (run_\w+)/.exec(title.text)[1];
  const nodes = await page.$$eval('#run-graph .node', (els) => els.map((el) => ({
    agent: el.dataset.agent, status: el.dataset.status, output: el.querySelector('.output').innerText,
    figures: el.querySelector('.figures').textContent,
  })));
  const run = await (await fetch(`${server.url}/v1/pipelines/${id}`)).json();
  assert.equal(run.status, 'completed');
  assert.deepEqual(nodes.map((n) => n.agent), ['planner', 'writer', 'editor']);
  for (const n of nodes) {
    const step = run.agents.find((a) => a.name === n.agent);
    assert.equal(n.status, 'done', n.agent);
    assert.ok(step.output.length > 0);
    assert.equal(squash(n.output), squash(step.output), n.agent);
    assert.match(n.figures, new RegExp(`^${step.tokens} tokens · [\\d.]+ s`), n.agent);
  }
  assert.deepEqual(tokenEvents, ['text/event-stream']);
  const log = await page.$eval('#run-log', (el) => el.textContent);
  for (const a of ['planner', 'writer', 'editor']) assert.match(log, new RegExp(`\\[agent:${a}\\] DONE`));
  assert.match(log, /COMPLETED/);
  const listed = await page.$eval(`#run-list [data-run="${id}"]`, (el) => el.textContent);
  assert.match(listed, /completed/);
  const saved = await (await fetch(`${server.url}/v1/pipeline-specs`)).json();
  assert.ok(saved.data.includes('three-agents'));
  await screenshot(page, 'pipeline.png');

  // The run again from the list, as a past run drawn from the store.
  const again = await openPage(browser, `${server.url}/#/pipelines`);
  await ready(again);
  await again.waitForSelector(`#run-list [data-run="${id}"]`);  // the list loads after the page is ready
  await again.click(`#run-list [data-run="${id}"]`);
  await again.waitForSelector('#run-graph[data-ended="1"]');
  const statuses = await again.$$eval('#run-graph .node', (els) => els.map((el) => el.dataset.status));
  assert.deepEqual(statuses, ['done', 'done', 'done']);
  assert.deepEqual(page.problems, []);
  assert.deepEqual(again.problems, []);
});

test('a retried agent ends done on its second attempt; a running pipeline can be cancelled', async () => {
  const page = await openPage(browser, `${server.url}/#/pipelines`);
  await ready(page);
  await setSpec(page, JSON.stringify({
    task: 'Once upon a time', temperature: 0, max_tokens: 16,
    agents: [{ name: 'flaky', prompt: '{task}', retries: 1 }],
  }, null, 2));
  // Every status the node shows on its way (the retry is over within milliseconds).
  await page.evaluate(() => {
    window.seenStatuses = [];
    new MutationObserver((records) => {
      for (const r of records) {
        const s = r.target.dataset?.status;
        if (r.target.classList?.contains('node') && s && window.seenStatuses.at(-1) !== s) window.seenStatuses.push(s);
      }
    }).observe(document.querySelector('#run-graph'), { attributes: true, subtree: true, attributeFilter: ['data-status'] });
  });
  await page.click('#run-start');
  await page.waitForSelector('#run-graph[data-ended="1"]', { timeout: 30000 });
  const node = await page.$eval('#run-graph .node', (el) => ({ status: el.dataset.status, figures: el.querySelector('.figures').textContent }));
  assert.equal(node.status, 'done');
  assert.deepEqual(await page.evaluate(() => window.seenStatuses), ['running', 'retrying', 'running', 'done']);
  assert.match(node.figures, /attempt 2/);
  assert.match(await page.$eval('#run-log', (el) => el.textContent), /\[agent:flaky\] RETRY 1\/1/);

  // Twenty rounds of two agents: long enough to cancel while it runs.
  await setSpec(page, JSON.stringify({
    task: 'Once upon a time', temperature: 0, max_tokens: 200,
    agents: [{ name: 'a', prompt: '{task}' }, { name: 'b', prompt: '{previous}' }],
    stages: [{ rounds: ['a', 'b'], until: 'NEVER-SAID', max_rounds: 20 }],
  }, null, 2));
  await page.click('#run-start');
  await page.waitForSelector('#run-graph .node[data-status="running"]', { timeout: 20000 });
  assert.equal(await page.$eval('#run-graph .rounds .label', (el) => el.textContent), 'rounds ×20 until "NEVER-SAID"');
  await page.click('#run-cancel');
  await page.waitForSelector('#run-title[data-status="cancelled"]', { timeout: 10000 });
  const id = /Run (run_\w+)/.exec(await page.$eval('#run-title', (el) => el.textContent))[1];
  const run = await (await fetch(`${server.url}/v1/pipelines/${id}`)).json();
  assert.equal(run.status, 'cancelled');
  assert.ok(run.agents.filter((a) => a.status === 'done').length < 40, 'it ended before its last round');
  assert.equal(await page.$eval('#run-cancel', (b) => b.disabled), true);
  assert.deepEqual(page.problems, []);
});
