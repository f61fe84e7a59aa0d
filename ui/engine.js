// The engine page: polls GET /v1/stats once a second while shown and charts
// the differences between polls (uPlot): decode and prompt tok/s, running and
// waiting requests, time to first token, KV blocks, prefix-cache hits; when
// the model's weights stream, weight-cache hit rate, bytes read per second and
// per generated token, the share of time compute waited for reads, memory
// against the budget, and per layer the time storage took to read its weights,
// the time compute waited for reads and the units read, per token over the
// last interval (one poll: at one token per step, the last tokens decoded).
// Each chart's element carries data-max (JSON: the largest value of each
// series in view), which the browser tests read.
import { getJson } from './api.js';

const $ = (id) => document.getElementById(id);
const POLL_MS = 1000;
const WINDOW = 180;        // points kept per chart (3 minutes)

let models = [];
let modelId = null;
let timer = null;
let prev = null;           // the previous /v1/stats answer
let charts = [];           // {def, el, plot, data}
let streamingShown = null;  // whether the streaming charts are shown (null: not known yet)

const css = (name) => getComputedStyle(document.documentElement).getPropertyValue(name).trim();

const fmtNum = (v, digits = 1) => {
  if (v == null || Number.isNaN(v)) return '–';
  const a = Math.abs(v);
  if (a >= 1e9) return `${(v / 1e9).toFixed(digits)}G`;
  if (a >= 1e6) return `${(v / 1e6).toFixed(digits)}M`;
  if (a >= 1e4) return `${(v / 1e3).toFixed(digits)}k`;
  return a >= 100 || Number.isInteger(v) ? String(Math.round(v)) : v.toFixed(digits);
};
const fmtBytes = (v) => {
  if (v == null || Number.isNaN(v)) return '–';
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let u = 0;
  while (Math.abs(v) >= 1024 && u < units.length - 1) { v /= 1024; ++u; }
  return `${v.toFixed(u ? 1 : 0)} ${units[u]}`;
};
const fmtPct = (v) => (v == null ? '–' : `${(100 * v).toFixed(1)} %`);
const fmtMs = (v) => (v == null ? '–' : `${(1000 * v).toFixed(1)} ms`);

// Chart definitions: series are functions of (engine delta, weights delta, dt, now) -> number|null.
const ENGINE_CHARTS = [
  { id: 'throughput', title: 'Throughput (tok/s)', fmt: fmtNum, series: [
    { label: 'decode', color: '--c1', get: (d) => d.generated_tokens / d.dt },
    { label: 'prompt (computed)', color: '--c2', get: (d) => Math.max(0, d.prefill_tokens) / d.dt },
  ] },
  { id: 'requests', title: 'Requests', fmt: fmtNum, series: [
    { label: 'running', color: '--c1', get: (d, now) => now.engine.running },
    { label: 'waiting', color: '--c2', get: (d, now) => now.engine.waiting },
  ] },
  { id: 'ttft', title: 'Time to first token (mean in interval)', fmt: fmtMs, series: [
    { label: 'TTFT', color: '--c1', get: (d) => (d.ttft_count > 0 ? d.ttft_sum / d.ttft_count : null) },
  ] },
  { id: 'kv', title: 'KV cache blocks', fmt: fmtNum, series: [
    { label: 'used', color: '--c1', get: (d, now) => now.engine.kv_blocks_used },
    { label: 'cached', color: '--c3', get: (d, now) => now.engine.kv_blocks_cached },
    { label: 'total', color: '--c4', get: (d, now) => now.engine.kv_blocks_total },
  ] },
  { id: 'prefix', title: 'Prefix-cache hits (prompt tok/s reused)', fmt: fmtNum, series: [
    { label: 'reused', color: '--c3', get: (d) => d.prefix_hit_tokens / d.dt },
    { label: 'prompt', color: '--c2', get: (d) => d.prompt_tokens / d.dt },
  ] },
];

const STREAM_CHARTS = [
  { id: 'w-hit', title: 'Weight-cache hit rate', fmt: fmtPct, series: [
    { label: 'hits / lookups', color: '--c3', get: (d) => (d.w && d.w.lookups > 0 ? d.w.hits / d.w.lookups : null) },
  ] },
  { id: 'w-read', title: 'Weight bytes read per second', fmt: fmtBytes, series: [
    { label: 'read/s', color: '--c1', get: (d) => (d.w ? d.w.bytes_read / d.dt : null) },
  ] },
  { id: 'w-per-token', title: 'Weight bytes read per generated token', fmt: fmtBytes, series: [
    { label: 'bytes/token', color: '--c2', get: (d) => (d.w && d.generated_tokens > 0 ? d.w.bytes_read / d.generated_tokens : null) },
  ] },
  { id: 'w-wait', title: 'I/O wait (share of wall time)', fmt: fmtPct, series: [
    { label: 'waiting for reads', color: '--c2', get: (d) => (d.w ? d.w.io_wait_seconds / d.dt : null) },
  ] },
  { id: 'w-mem', title: 'Memory', fmt: fmtBytes, series: [
    { label: 'process RSS', color: '--c1', get: (d, now) => now.rss },
    { label: '--mem-budget', color: '--c4', get: (d, now) => now.memBudget || null },
    { label: 'weight arena + resident', color: '--c3', get: (d, now) => (now.weights ? now.weights.arena_bytes + now.weights.resident_bytes : null) },
  ] },
];

function makeChart(container, def) {
  const el = document.createElement('div');
  el.className = 'chart';
  el.dataset.chart = def.id;
  const h = document.createElement('h3');
  h.textContent = def.title;
  const host = document.createElement('div');
  el.append(h, host);
  container.append(el);
  const c = { def, el, host, plot: null, data: [[], ...def.series.map(() => [])] };
  buildPlot(c);
  return c;
}

function buildPlot(c) {
  c.plot?.destroy();
  const axis = { stroke: css('--muted'), grid: { stroke: css('--border'), width: 1 }, ticks: { stroke: css('--border') } };
  const width = Math.max(260, c.el.clientWidth - 12 || 360);
  c.plot = new globalThis.uPlot({
    width,
    height: 170,
    scales: { x: { time: true }, y: { range: (u, min, max) => [0, max > 0 ? max * 1.1 : 1] } },
    axes: [axis, { ...axis, size: 84, values: (u, vals) => vals.map((v) => c.def.fmt(v)) }],
    series: [{}, ...c.def.series.map((s) => ({
      label: s.label, stroke: css(s.color), width: 2, spanGaps: false, value: (u, v) => c.def.fmt(v),
    }))],
    legend: { show: true },
  }, c.data, c.host);
}

function push(c, t, values) {
  c.data[0].push(t);
  values.forEach((v, i) => c.data[i + 1].push(v == null || !Number.isFinite(v) ? null : v));
  if (c.data[0].length > WINDOW) for (const a of c.data) a.shift();
  c.plot.setData(c.data);
  c.el.dataset.max = JSON.stringify(c.data.slice(1).map((a) => a.reduce((m, v) => (v != null && v > m ? v : m), 0)));
}

function tile(key, label, value) {
  let el = document.querySelector(`#engine-tiles [data-key="${key}"]`);
  if (!el) {
    el = document.createElement('div');
    el.className = 'tile';
    el.dataset.key = key;
    el.innerHTML = '<div class="label"></div><div class="value"></div>';
    el.querySelector('.label').textContent = label;
    $('engine-tiles').append(el);
  }
  el.querySelector('.value').textContent = value;
}

function modelStats(s) {
  const m = s.models.find((x) => x.id === modelId) ?? s.models[0];
  return { engine: m.engine, weights: m.weights, dist: m.dist, memBudget: s.mem_budget_bytes, rss: s.process.rss_bytes, time: s.time };
}

function delta(a, b) {
  const e = (k) => b.engine[k] - a.engine[k];
  const d = {
    dt: Math.max(1e-3, b.time - a.time),
    generated_tokens: e('generated_tokens'),
    prompt_tokens: e('prompt_tokens'),
    prefix_hit_tokens: e('prefix_hit_tokens'),
    // Prompt positions the model ran in this interval (counted per step, recomputation included).
    prefill_tokens: e('computed_tokens') - e('generated_tokens'),
    ttft_sum: b.engine.ttft_seconds.sum - a.engine.ttft_seconds.sum,
    ttft_count: b.engine.ttft_seconds.count - a.engine.ttft_seconds.count,
    w: null,
    layers: null,
  };
  if (a.weights && b.weights) {
    const w = (k) => b.weights[k] - a.weights[k];
    d.w = { bytes_read: w('bytes_read'), lookups: w('lookups'), hits: w('hits'), io_wait_seconds: w('io_wait_seconds') };
    d.layers = b.weights.layers.map((l, i) => {
      const o = a.weights.layers[i] ?? { misses: 0, inflight: 0, wait_seconds: 0, read_seconds: 0, read_bytes: 0 };
      return {
        reads: l.misses + l.inflight - o.misses - o.inflight,
        wait: l.wait_seconds - o.wait_seconds,
        readTime: l.read_seconds - o.read_seconds,
        readBytes: l.read_bytes - o.read_bytes,
      };
    });
  }
  return d;
}

// One bar per layer (the last: tensors outside the layers), scaled to the largest; the value per token.
function paintBars(box, values, tokens, describe) {
  const per = values.map((v) => (tokens > 0 ? v / tokens : v));
  const max = Math.max(1e-12, ...per);
  box.replaceChildren(...per.map((v, i) => {
    const b = document.createElement('div');
    b.className = 'bar';
    b.style.height = `${Math.round((100 * v) / max)}%`;
    b.dataset.value = String(v);
    b.title = `${i === per.length - 1 ? 'outside the layers' : `layer ${i}`}: ${describe(v)}${tokens > 0 ? ' per token' : ''}`;
    return b;
  }));
  const top = per.indexOf(Math.max(...per));
  box.nextElementSibling.textContent = top < 0 ? '' : `largest: ${top === per.length - 1 ? 'outside the layers' : `layer ${top}`}, ` +
    `${describe(per[top])}${tokens > 0 ? ' per token' : ''}; the last bar is the tensors outside the layers`;
}

function paintLayers(layers, tokens) {
  paintBars($('engine-layer-read'), layers.map((l) => l.readTime), tokens, (v) => `${fmtMs(v)} reading from storage`);
  paintBars($('engine-layers'), layers.map((l) => l.reads), tokens, (v) => `${v.toFixed(2)} units read`);
  paintBars($('engine-layer-wait'), layers.map((l) => l.wait), tokens, (v) => `${fmtMs(v)} waiting for reads`);
}

function paintTiles(now, d, raw) {
  const e = now.engine;
  tile('decode', 'Decode tok/s', fmtNum(d.generated_tokens / d.dt));
  tile('prompt', 'Prompt tok/s (computed)', fmtNum(Math.max(0, d.prefill_tokens) / d.dt));
  tile('running', 'Running / waiting', `${e.running} / ${e.waiting}`);
  tile('ttft', 'TTFT, mean since start', fmtMs(e.ttft_seconds.count ? e.ttft_seconds.sum / e.ttft_seconds.count : null));
  tile('kv', 'KV blocks used / cached / total', `${e.kv_blocks_used} / ${e.kv_blocks_cached} / ${e.kv_blocks_total}`);
  tile('prefix', 'Prefix-cache reuse', e.prompt_tokens ? fmtPct(e.prefix_hit_tokens / e.prompt_tokens) : '–');
  if (e.kv_disk) {
    const k = e.kv_disk;
    tile('kv-disk-hits', 'KV disk tier: tokens loaded', `${fmtNum(k.hit_tokens, 2)} (${fmtBytes(k.loaded_bytes)} in ${fmtMs(k.load_seconds)})`);
    tile('kv-disk-bytes', 'KV disk tier: held / written', `${fmtBytes(k.bytes)} / ${fmtBytes(k.written_bytes)}`);
  }
  if (e.speculative) paintSpec(e.speculative);
  tile('generated', 'Tokens generated', fmtNum(e.generated_tokens, 2));
  tile('finished', 'Requests finished', fmtNum(e.requests_finished, 2));
  tile('rss', 'Process memory (RSS)', fmtBytes(now.rss));
  if (raw.pipelines) tile('pipelines', 'Pipeline runs running / queued', `${raw.pipelines.running} / ${raw.pipelines.queued}`);
  if (now.weights) {
    const w = now.weights;
    tile('w-hit', 'Weight-cache hit rate', w.lookups ? fmtPct(w.hits / w.lookups) : '–');
    tile('w-read', 'Weights read, total', fmtBytes(w.bytes_read));
    tile('w-budget', 'RSS / --mem-budget', now.memBudget ? `${fmtBytes(now.rss)} / ${fmtBytes(now.memBudget)}` : 'no budget');
  }
  if (now.dist) paintDist(now.dist);
}

// Speculative decoding: drafted and accepted tokens, and the governor's state (--spec).
function paintSpec(x) {
  tile('spec', 'Drafts: accepted / verified', x.mode === 'off' ? 'off'
    : `${fmtNum(x.accepted_tokens, 2)} / ${fmtNum(x.drafted_tokens, 2)}${x.drafted_tokens ? ` (${fmtPct(x.acceptance_rate)})` : ''}`);
  if (x.mode === 'off') return;
  const cost = x.verify_cost_ratio ? `${x.verify_cost_ratio.toFixed(2)}×` : '–';
  tile('spec-governor', `Governor (--spec ${x.mode}): acceptance est., drafting, cost of a drafted step`,
    `${fmtPct(x.acceptance_estimate)}, ${x.drafting_sequences} seq, ${cost}`);
  if (x.draft_model)
    tile('spec-model', 'Draft model (-md): accepted / drafted, time drafting',
      `${fmtNum(x.model_accepted_tokens, 2)} / ${fmtNum(x.model_drafted_tokens, 2)}, ${x.draft_seconds.toFixed(1)} s`);
}

// --dist ep: the home rank's traffic, and one tile per other rank (its own disk and cache).
function paintDist(x) {
  tile('dist-ranks', 'Ranks (--dist ep)', `${x.ranks}: ${x.expert_jobs ? fmtPct(x.expert_jobs_home / x.expert_jobs) : '–'} of expert jobs here`);
  tile('dist-net', 'Network + MPI per token', x.network_seconds_per_token === null ? '–' : fmtMs(x.network_seconds_per_token));
  tile('dist-wait', 'Waiting for ranks per token', x.wait_seconds_per_token === null ? '–' : fmtMs(x.wait_seconds_per_token));
  tile('dist-bytes', 'Sent / received', `${fmtBytes(x.bytes_sent)} / ${fmtBytes(x.bytes_received)}`);
  for (const r of x.rank) {
    tile(`dist-rank-${r.rank}`, `Rank ${r.rank} (${r.host}): read, hit rate, compute`,
      `${fmtBytes(r.bytes_read)}, ${r.hit_rate === null ? 'resident' : fmtPct(r.hit_rate)}, ${fmtMs(r.compute_seconds)}`);
  }
}

async function poll() {
  const raw = await getJson('/v1/stats');
  const now = modelStats(raw);
  if (prev) {
    const d = delta(prev, now);
    const t = now.time;
    for (const c of charts) {
      const isStream = STREAM_CHARTS.includes(c.def);
      if (isStream && !now.weights) continue;
      push(c, t, c.def.series.map((s) => s.get(d, now)));
    }
    paintTiles(now, d, raw);
    if (d.layers) paintLayers(d.layers, d.generated_tokens);
    document.getElementById('page-engine').dataset.polls = String(Number(document.getElementById('page-engine').dataset.polls ?? 0) + 1);
  }
  if (Boolean(now.weights) !== streamingShown) {
    streamingShown = Boolean(now.weights);
    $('engine-streaming').hidden = !streamingShown;
    $('engine-mode').textContent = streamingShown
      ? 'weights stream from storage under the memory budget'
      : 'weights resident (no streaming figures)';
  }
  prev = now;
}

function loop() {
  clearTimeout(timer);
  timer = setTimeout(async () => {
    try {
      await poll();
    } catch {
      // shown again at the next poll; a 401 sends the page to the key prompt
    }
    if (timer !== null) loop();
  }, POLL_MS);
}

function buildCharts() {
  $('engine-charts').replaceChildren();
  $('engine-stream-charts').replaceChildren();
  const old = new Map(charts.map((c) => [c.def.id, c.data]));
  charts = [
    ...ENGINE_CHARTS.map((def) => makeChart($('engine-charts'), def)),
    ...STREAM_CHARTS.map((def) => makeChart($('engine-stream-charts'), def)),
  ];
  for (const c of charts) {
    if (old.has(c.def.id)) {
      c.data = old.get(c.def.id);
      c.plot.setData(c.data);
    }
  }
}

export function start(modelList) {
  models = modelList;
  modelId = models[0]?.id ?? null;
  $('engine-model').replaceChildren(...models.map((m) => new Option(m.id, m.id)));
  $('engine-model').addEventListener('change', () => {
    modelId = $('engine-model').value;
    prev = null;
    for (const c of charts) {
      c.data = [[], ...c.def.series.map(() => [])];
      c.plot.setData(c.data);
    }
  });
  buildCharts();
  const ro = new ResizeObserver(() => {
    for (const c of charts) c.plot.setSize({ width: Math.max(260, c.el.clientWidth - 12), height: 170 });
  });
  ro.observe($('engine-charts'));
  ro.observe($('engine-stream-charts'));
  show();
}

export function show() {
  poll().catch(() => {});
  timer = 0;
  loop();
}

export function hide() {
  clearTimeout(timer);
  timer = null;
}

export const stop = hide;

export function themeChanged() {
  buildCharts();
}
