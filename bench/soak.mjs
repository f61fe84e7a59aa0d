#!/usr/bin/env node
// A soak of `spool serve` (issue 16): mixed load at a fixed concurrency for
// --minutes N on loopback (completions streamed and not, clients that cancel
// mid-stream or give up waiting, chat, structured output, long prompts sharing
// a prefix), sampling the server's RSS, open fds, threads, KV blocks and
// request counters every --sample-s seconds. Writes soak.json, soak.md and
// soak.svg (the curves) to --out and exits 1 when a criterion fails:
//   - no error answer or failed connection the load did not ask for;
//   - RSS at the end (idle) within 5 % of RSS at the end of warm-up;
//   - open fds at the end no more than at the end of warm-up (+2);
//   - no KV block held, nothing running or waiting at the end;
//   - p99 inter-token latency (client side) of the last window within 20 % of
//     the first (windows: 5 minutes, or a fifth of the run when shorter).
// Usage: node bench/soak.mjs [--minutes 10] [--concurrency 8] [--out DIR]
//        [--model GGUF] [--no-chat] [--warmup-minutes M] [--sample-s 10]
// SPOOL_BIN / SPOOL_SHARED_DIR as for tests/api (default build/spool, ../shared).
import { mkdirSync, readFileSync, readdirSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { startServer, qwen2TinyWithTemplate, STORIES } from '../tests/api/spool_process.mjs';

const argv = process.argv.slice(2);
const opt = (name, def) => {
  const i = argv.indexOf(`--${name}`);
  return i >= 0 ? argv[i + 1] : def;
};
const MINUTES = Number(opt('minutes', 10));
const CONCURRENCY = Number(opt('concurrency', 8));
const SAMPLE_S = Number(opt('sample-s', 10));
const WARMUP_MIN = Number(opt('warmup-minutes', Math.min(2, MINUTES / 5)));
const MODEL = opt('model', STORIES);
const CHAT = !argv.includes('--no-chat');
const OUT = opt('out', path.resolve(`bench/results/soak-${new Date().toISOString().replace(/[:.]/g, '-')}`));
const WINDOW_MIN = Math.min(5, MINUTES / 5);

mkdirSync(OUT, { recursive: true });

// ---- the server ----
const chatModel = CHAT ? qwen2TinyWithTemplate() : null;
const serverArgs = ['--parallel', '8', '-c', '1024'];
if (chatModel) serverArgs.push('-m', `qwen=${chatModel.dir}`);
const server = await startServer(MODEL, serverArgs, { timeoutMs: 60000 });
const pid = server.proc.pid;
console.log(`soak: spool serve pid ${pid} on ${server.url}, ${MINUTES} min at concurrency ${CONCURRENCY}, out ${OUT}`);

// ---- samples ----
function procStatus() {
  const s = readFileSync(`/proc/${pid}/status`, 'utf8');
  const kb = (k) => Number(new RegExp(`^${k}:\\s+(\\d+)`, 'm').exec(s)?.[1] ?? NaN);
  return { rss_kb: kb('VmRSS'), hwm_kb: kb('VmHWM'), threads: kb('Threads'), fds: readdirSync(`/proc/${pid}/fd`).length };
}
async function serverMetrics() {
  const text = await (await fetch(`${server.url}/metrics`)).text();
  const m = {};
  for (const line of text.split('\n')) {
    if (!line || line.startsWith('#')) continue;
    const i = line.lastIndexOf(' ');
    m[line.slice(0, i)] = Number(line.slice(i + 1));
  }
  const http5xx = Object.entries(m).filter(([k]) => /^spool_http_responses_total\{code="5/.test(k))
    .reduce((a, [, v]) => a + v, 0);
  return {
    kv_used: m.spool_kv_blocks_used, kv_cached: m.spool_kv_blocks_cached, running: m.spool_requests_running,
    waiting: m.spool_requests_waiting, finished: m.spool_requests_finished_total,
    cancelled: m.spool_requests_cancelled_total, failed: m.spool_requests_failed_total, http_5xx: http5xx,
    heap_in_use_kb: m['spool_process_heap_bytes{state="in_use"}'] / 1024,
    heap_free_kb: m['spool_process_heap_bytes{state="free"}'] / 1024,
  };
}

const t0 = Date.now();
const tEnd = t0 + MINUTES * 60000;
const elapsed = () => (Date.now() - t0) / 1000;
const samples = [];
const errors = [];
const counts = {};
let itlWindow = [];         // inter-token gaps (ms) since the last sample
const itlByWindow = [];     // [{from_s, gaps: []}]

function p(arr, q) {
  if (!arr.length) return null;
  const s = [...arr].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor(q * s.length))];
}

async function sample(label = '') {
  const st = procStatus();
  const m = await serverMetrics();
  const row = { t_s: Math.round(elapsed()), ...st, ...m, done: { ...counts }, errors: errors.length,
                itl_p50_ms: p(itlWindow, 0.5), itl_p99_ms: p(itlWindow, 0.99), label };
  itlWindow = [];
  samples.push(row);
  console.log(`t=${row.t_s}s rss=${(st.rss_kb / 1024).toFixed(1)}MB heap=${(m.heap_in_use_kb / 1024).toFixed(1)}+` +
              `${(m.heap_free_kb / 1024).toFixed(1)}free fds=${st.fds} threads=${st.threads} ` +
              `kv=${m.kv_used} run=${m.running} wait=${m.waiting} cancelled=${m.cancelled} errors=${errors.length} ` +
              `itl_p99=${row.itl_p99_ms?.toFixed?.(1)}ms ${label}`);
  return row;
}

// ---- the load ----
let seed = 1;
const rand = () => ((seed = (seed * 1664525 + 1013904223) >>> 0) / 2 ** 32);
const pick = (a) => a[Math.floor(rand() * a.length)];
const SHORT = ['Once upon a time', 'The little dog', 'Lily wanted to', 'One day, a boy named Tom', 'The sun was'];
const PREFIX = 'Once upon a time there was a little girl named Lily. She loved to play in the park with her dog. '.repeat(4);
const SCHEMA = {
  type: 'object', properties: { name: { type: 'string', maxLength: 10 }, age: { type: 'integer' } },
  required: ['name', 'age'], additionalProperties: false,
};

function recordGap(ms) {
  itlWindow.push(ms);
  const w = Math.floor(elapsed() / (WINDOW_MIN * 60));
  (itlByWindow[w] ??= { from_s: w * WINDOW_MIN * 60, gaps: [] }).gaps.push(ms);
}

async function post(route, body, signal) {
  return fetch(`${server.url}${route}`, {
    method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify(body), signal,
  });
}

// Streams; returns when done or after `abortAfter` chunks (then aborts: an intended cancel).
async function streamed(route, body, abortAfter = Infinity) {
  const ac = new AbortController();
  const r = await post(route, { ...body, stream: true }, ac.signal);
  if (r.status !== 200) throw new Error(`${route} streamed: HTTP ${r.status} ${await r.text()}`);
  const reader = r.body.getReader();
  const dec = new TextDecoder();
  let last = null, chunks = 0, text = '';
  for (;;) {
    let res;
    try {
      res = await reader.read();
    } catch (e) {
      if (ac.signal.aborted) return 'cancelled';
      throw e;
    }
    if (res.done) break;
    text += dec.decode(res.value, { stream: true });
    const now = performance.now();
    if (last !== null) recordGap(now - last);
    last = now;
    if (++chunks >= abortAfter) {
      ac.abort();
      return 'cancelled';
    }
  }
  if (/"error"/.test(text) && /data: \{"error"/.test(text)) throw new Error(`${route} stream error: ${text.slice(-400)}`);
  if (!text.includes('[DONE]')) throw new Error(`${route} stream without [DONE]: ${text.slice(-200)}`);
  return 'ok';
}

async function whole(route, body, giveUpMs = 0) {
  const ac = new AbortController();
  const timer = giveUpMs ? setTimeout(() => ac.abort(), giveUpMs) : null;
  try {
    const r = await post(route, body, ac.signal);
    const text = await r.text();
    if (r.status !== 200) throw new Error(`${route}: HTTP ${r.status} ${text.slice(0, 300)}`);
    return JSON.parse(text);
  } catch (e) {
    if (ac.signal.aborted) return 'cancelled';
    throw e;
  } finally {
    if (timer) clearTimeout(timer);
  }
}

const KINDS = [
  ['stream', 30], ['whole', 15], ['cancel_stream', 10], ['cancel_whole', 5], ['prefix', 10], ['structured', 10],
  ...(CHAT ? [['chat_stream', 10], ['chat_whole', 10]] : []),
];
const totalWeight = KINDS.reduce((a, [, w]) => a + w, 0);
function pickKind() {
  let x = rand() * totalWeight;
  for (const [k, w] of KINDS) if ((x -= w) < 0) return k;
  return KINDS[0][0];
}

async function one(kind) {
  const prompt = pick(SHORT);
  const max_tokens = 8 + Math.floor(rand() * 120);
  const base = { prompt, max_tokens, temperature: 0.8, seed: Math.floor(rand() * 1e6) };
  const chat = { model: 'qwen', messages: [{ role: 'user', content: prompt }], max_tokens: 8 + Math.floor(rand() * 40),
                 temperature: 0.8 };
  switch (kind) {
    case 'stream': return streamed('/v1/completions', base);
    case 'whole': return (await whole('/v1/completions', base), 'ok');
    case 'cancel_stream': return streamed('/v1/completions', { ...base, max_tokens: 200 }, 1 + Math.floor(rand() * 30));
    case 'cancel_whole': {
      const r = await whole('/v1/completions', { ...base, max_tokens: 400 }, 5 + Math.floor(rand() * 100));
      return r === 'cancelled' ? 'cancelled' : 'ok';
    }
    case 'prefix': return streamed('/v1/completions', { ...base, prompt: PREFIX + prompt });
    case 'structured': {
      const r = await whole('/v1/completions', {
        ...base, max_tokens: 200, response_format: { type: 'json_schema', json_schema: { name: 'p', schema: SCHEMA } },
      });
      const v = JSON.parse(r.choices[0].text);
      if (typeof v.name !== 'string' || !Number.isInteger(v.age)) throw new Error(`structured: ${r.choices[0].text}`);
      return 'ok';
    }
    case 'chat_stream': return streamed('/v1/chat/completions', chat);
    case 'chat_whole': return (await whole('/v1/chat/completions', chat), 'ok');
  }
  throw new Error(kind);
}

async function worker() {
  while (Date.now() < tEnd) {
    const kind = pickKind();
    try {
      const outcome = await one(kind);
      counts[`${kind}:${outcome}`] = (counts[`${kind}:${outcome}`] ?? 0) + 1;
    } catch (e) {
      errors.push({ t_s: Math.round(elapsed()), kind, message: String(e?.stack ?? e).slice(0, 500),
                    cause: e?.cause ? String(e.cause) : undefined });
      counts[`${kind}:error`] = (counts[`${kind}:error`] ?? 0) + 1;
    }
  }
}

await sample('start');
const sampler = setInterval(() => sample().catch((e) => errors.push({ t_s: elapsed(), kind: 'sample', message: String(e) })),
                            SAMPLE_S * 1000);
await Promise.all(Array.from({ length: CONCURRENCY }, worker));
clearInterval(sampler);

// Idle: let keep-alive connections lapse and the engine settle, then the last sample.
let end;
for (let i = 0; i < 30; ++i) {
  await new Promise((r) => setTimeout(r, 1000));
  end = await sample(i === 0 ? 'idle' : '');
  if (i >= 3 && end.kv_used === 0 && end.running === 0 && end.waiting === 0) break;
}
end.label = 'end';
await server.stop();
chatModel?.remove();

// ---- verdict ----
const warm = samples.find((s) => s.t_s >= WARMUP_MIN * 60) ?? samples[0];
const afterWarm = samples.filter((s) => s.t_s >= warm.t_s);
const rssGrowth = (end.rss_kb - warm.rss_kb) / warm.rss_kb;
const rssMaxGrowth = (Math.max(...afterWarm.map((s) => s.rss_kb)) - warm.rss_kb) / warm.rss_kb;
const windows = itlByWindow.filter(Boolean).map((w) => ({ from_s: w.from_s, n: w.gaps.length,
                                                          p50_ms: p(w.gaps, 0.5), p99_ms: p(w.gaps, 0.99) }));
const full = windows.filter((w) => w.from_s + WINDOW_MIN * 60 <= MINUTES * 60 + 1);
const firstW = full[0], lastW = full[full.length - 1];
const itlRatio = firstW && lastW ? lastW.p99_ms / firstW.p99_ms : null;
const criteria = {
  no_unasked_errors: { pass: errors.length === 0, value: errors.length },
  rss_growth_after_warmup_lt_5pct: { pass: rssGrowth < 0.05, value: rssGrowth, max_during: rssMaxGrowth },
  fds_flat: { pass: end.fds <= warm.fds + 2, value: `${warm.fds} -> ${end.fds}` },
  kv_free_at_end: { pass: end.kv_used === 0 && end.running === 0 && end.waiting === 0,
                    value: `kv_used ${end.kv_used}, running ${end.running}, waiting ${end.waiting}` },
  itl_p99_last_within_20pct_of_first: { pass: itlRatio !== null && itlRatio <= 1.2, value: itlRatio },
  no_failed_requests: { pass: end.failed === 0, value: end.failed },
};
const pass = Object.values(criteria).every((c) => c.pass);
const cpu = (() => {
  try {
    return /model name\s*:\s*(.*)/.exec(readFileSync('/proc/cpuinfo', 'utf8'))?.[1];
  } catch {
    return '';
  }
})();
const result = {
  pass, criteria, minutes: MINUTES, concurrency: CONCURRENCY, warmup_minutes: WARMUP_MIN, window_minutes: WINDOW_MIN,
  model: MODEL, chat: CHAT, server_args: serverArgs, cpu, started: new Date(t0).toISOString(), counts,
  requests: Object.values(counts).reduce((a, b) => a + b, 0), errors, itl_windows: windows, samples,
};
writeFileSync(path.join(OUT, 'soak.json'), JSON.stringify(result, null, 1));

const fmt = (x, d = 1) => (x === null || x === undefined || Number.isNaN(x) ? '-' : Number(x).toFixed(d));
let md = `# Soak of spool serve: ${pass ? 'PASS' : 'FAIL'}\n\n`;
md += `${MINUTES} min, concurrency ${CONCURRENCY}, warm-up ${WARMUP_MIN} min, model ${path.basename(MODEL)}` +
      `${CHAT ? ' + qwen2-tiny (chat)' : ''}, CPU ${cpu}, started ${result.started}.\n\n`;
md += '| criterion | pass | value |\n|---|---|---|\n';
for (const [k, c] of Object.entries(criteria))
  md += `| ${k} | ${c.pass ? 'yes' : 'NO'} | ${typeof c.value === 'number' ? fmt(c.value, 4) : c.value}${c.max_during !== undefined ? ` (max during: ${fmt(c.max_during, 4)})` : ''} |\n`;
md += `\nRequests: ${result.requests} (${Object.entries(counts).map(([k, v]) => `${k} ${v}`).join(', ')}).\n\n`;
md += '| window from (s) | tokens gaps | ITL p50 (ms) | ITL p99 (ms) |\n|---|---|---|---|\n';
for (const w of windows) md += `| ${w.from_s} | ${w.n} | ${fmt(w.p50_ms, 2)} | ${fmt(w.p99_ms, 2)} |\n`;
md += '\n| t (s) | RSS (MB) | heap in use (MB) | heap free, held (MB) | fds | threads | KV used | running | waiting | cancelled | failed | 5xx | errors | ITL p99 (ms) |\n';
md += '|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n';
for (const s of samples)
  md += `| ${s.t_s}${s.label ? ` ${s.label}` : ''} | ${fmt(s.rss_kb / 1024)} | ${fmt(s.heap_in_use_kb / 1024)} | ` +
        `${fmt(s.heap_free_kb / 1024)} | ${s.fds} | ${s.threads} | ${s.kv_used} | ` +
        `${s.running} | ${s.waiting} | ${s.cancelled} | ${s.failed} | ${s.http_5xx} | ${s.errors} | ${fmt(s.itl_p99_ms, 2)} |\n`;
if (errors.length) md += `\nErrors (first 20):\n\n${errors.slice(0, 20).map((e) => `- t=${e.t_s}s ${e.kind}: ${e.message.split('\n')[0]}${e.cause ? ` (cause: ${e.cause})` : ''}`).join('\n')}\n`;
writeFileSync(path.join(OUT, 'soak.md'), md);

// The curves: RSS (MB), fds and KV blocks used over time, one panel each.
function svg() {
  const W = 720, H = 150, PAD = 40;
  const tMax = Math.max(...samples.map((s) => s.t_s), 1);
  const panel = (title, key, scale, y0) => {
    const vals = samples.map((s) => (s[key] ?? 0) * scale);
    const lo = Math.min(...vals), hi = Math.max(...vals, lo + 1e-9);
    const pts = samples.map((s, i) => `${(PAD + (s.t_s / tMax) * (W - 2 * PAD)).toFixed(1)},` +
      `${(y0 + H - 20 - ((vals[i] - lo) / (hi - lo)) * (H - 40)).toFixed(1)}`).join(' ');
    return `<text x="${PAD}" y="${y0 + 14}" font-size="12">${title}: ${fmt(lo)} .. ${fmt(hi)}</text>` +
      `<polyline fill="none" stroke="#36c" stroke-width="1.5" points="${pts}"/>` +
      `<line x1="${PAD}" y1="${y0 + H - 20}" x2="${W - PAD}" y2="${y0 + H - 20}" stroke="#999"/>`;
  };
  const body = panel('RSS (MB)', 'rss_kb', 1 / 1024, 0) + panel('open fds', 'fds', 1, H) +
    panel('KV blocks used', 'kv_used', 1, 2 * H) + panel('ITL p99 per sample (ms)', 'itl_p99_ms', 1, 3 * H) +
    `<text x="${W - PAD}" y="${4 * H}" font-size="11" text-anchor="end">t = 0 .. ${tMax} s</text>`;
  return `<svg xmlns="http://www.w3.org/2000/svg" width="${W}" height="${4 * H + 10}">${body}</svg>\n`;
}
writeFileSync(path.join(OUT, 'soak.svg'), svg());
console.log(md.split('\n').slice(0, 12).join('\n'));
console.log(`soak: ${pass ? 'PASS' : 'FAIL'}; ${OUT}/soak.{json,md,svg}`);
process.exit(pass ? 0 : 1);
