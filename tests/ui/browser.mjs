// Shared by the browser tests: Debian's chromium launched headless through
// puppeteer-core, pages that record their own errors (script errors, console
// errors such as CSP violations) and every request they make, and screenshots.
import puppeteer from 'puppeteer-core';
import { mkdirSync } from 'node:fs';
import path from 'node:path';

export { startServer, stopProcess, runSpool, qwen2TinyWithTemplate, STORIES, SPOOL_BIN } from '../api/spool_process.mjs';

export function launch() {
  return puppeteer.launch({
    executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
    headless: true,
    args: ['--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage', '--no-first-run', '--no-default-browser-check',
      '--disable-extensions', '--disable-background-networking'],
  });
}

// A new page (in its own browser context unless `context` is given) at `url`.
// page.problems: script errors and console errors; page.requests: URLs asked for.
export async function openPage(browser, url, { width = 1280, height = 860, context = null } = {}) {
  const ctx = context ?? (await browser.createBrowserContext());
  const page = await ctx.newPage();
  await page.setViewport({ width, height });
  page.problems = [];
  page.requests = [];
  page.on('pageerror', (e) => page.problems.push(`page error: ${e.message}`));
  page.on('console', (m) => {
    if (m.type() === 'error') page.problems.push(`console error: ${m.text()}`);
  });
  page.on('request', (r) => page.requests.push({ url: r.url(), headers: r.headers() }));
  page.on('dialog', (d) => {
    page.problems.push(`dialog: ${d.message()}`);
    d.dismiss();
  });
  if (url) await page.goto(url);
  return page;
}

export const ready = (page, timeout = 15000) => page.waitForSelector('body[data-ready="1"]', { timeout });

// Replaces an input's value the way a user does (select all, type), then leaves it.
export async function fill(page, selector, value) {
  await page.click(selector, { clickCount: 3 });
  await page.keyboard.down('Control');
  await page.keyboard.press('a');
  await page.keyboard.up('Control');
  await page.keyboard.press('Backspace');
  await page.keyboard.type(String(value));
  await page.keyboard.press('Tab');
}

export async function screenshot(page, name, { fullPage = false } = {}) {
  const dir = process.env.SPOOL_UI_SCREENSHOT_DIR ?? path.resolve('ui-screenshots');
  mkdirSync(dir, { recursive: true });
  await page.screenshot({ path: path.join(dir, name), fullPage });
}

export const squash = (s) => s.replace(/\s+/g, ' ').trim();

export async function stats(url, headers = {}) {
  const r = await fetch(`${url}/v1/stats`, { headers });
  if (!r.ok) throw new Error(`/v1/stats: HTTP ${r.status}`);
  return r.json();
}
