// The pipelines page: a JSON spec editor (line numbers; syntax faults and the
// server's validation errors marked on their line), saved specs, running a
// spec with an input, and a run drawn as a graph of its stages (parallel
// stages stacked, rounds boxed) whose nodes follow the run's SSE events:
// status, attempts, tokens, time, and each agent's output streaming in. The
// run's log lines are below; past runs come from the server's store (drawn
// from the spec this browser sent, else from their steps' timing) and a
// running one can be cancelled.
import { request, getJson, postJson, readEvents, ApiError } from './api.js';
import { setMarkdown } from './markdown.js';
import { scanJson, lineColumn, locate, JsonFault } from './json_locate.js';

const $ = (id) => document.getElementById(id);
const RUN_SPECS = 'spool.runSpecs';  // run id -> the spec this browser submitted (to draw its stages)

const EXAMPLE = {
  name: 'three-agents',
  task: 'Once upon a time',
  temperature: 0,
  max_tokens: 32,
  agents: [
    { name: 'planner', prompt: '{task}' },
    { name: 'writer', prompt: '{previous}' },
    { name: 'editor', prompt: '{previous}' },
  ],
  stages: ['planner', 'writer', 'editor'],
};

let view = null;          // the run shown: {id, status, nodes: Map(name -> node), controller}
let lastRunId = null;     // paging of the runs list
let logTimer = null;
let parseTimer = null;    // the check of the spec text after typing stops

// ---- editor --------------------------------------------------------------

function paintGutter(badLine = null) {
  const n = $('spec-text').value.split('\n').length;
  const g = $('spec-gutter');
  g.replaceChildren();
  for (let i = 1; i <= n; ++i) {
    const s = document.createElement('span');
    s.textContent = String(i);
    if (i === badLine) s.className = 'bad';
    g.append(s, '\n');
  }
  g.scrollTop = $('spec-text').scrollTop;
}

function clearFault() {
  $('spec-error').textContent = '';
  $('spec-error').dataset.offset = '';
  $('spec-editor').classList.remove('invalid');
  paintGutter();
}

function showFault(message, offset) {
  const text = $('spec-text').value;
  let prefix = '';
  let line = null;
  if (offset != null) {
    const lc = lineColumn(text, offset);
    line = lc.line;
    prefix = `line ${lc.line}, column ${lc.column}: `;
  }
  $('spec-error').textContent = prefix + message;
  $('spec-error').dataset.offset = offset ?? '';
  $('spec-editor').classList.add('invalid');
  paintGutter(line);
}

// The spec object, or null with the fault shown.
function parseSpec() {
  clearTimeout(parseTimer);  // a check due later would clear a server's fault shown now
  const text = $('spec-text').value;
  try {
    scanJson(text);
  } catch (e) {
    if (e instanceof JsonFault) {
      showFault(`invalid JSON: ${e.message}`, e.offset);
      return null;
    }
    throw e;
  }
  const spec = JSON.parse(text);
  if (typeof spec !== 'object' || spec === null || Array.isArray(spec)) {
    showFault('a spec is a JSON object', 0);
    return null;
  }
  clearFault();
  return spec;
}

// A server error about the spec, marked where its `param` is.
function showServerFault(e) {
  const text = $('spec-text').value;
  const offset = e.param ? locate(text, e.param) : null;
  showFault(e.param ? `${e.message} (${e.param})` : e.message, offset);
}

function setSpecText(spec) {
  $('spec-text').value = JSON.stringify(spec, null, 2);
  clearFault();
}

async function loadSpecNames() {
  const r = await getJson('/v1/pipeline-specs');
  const sel = $('spec-saved');
  const keep = sel.value;
  sel.replaceChildren(new Option('Example: three-agent chain', ''), ...r.data.map((n) => new Option(n, n)));
  if (r.data.includes(keep)) sel.value = keep;
}

async function loadSpec() {
  const name = $('spec-saved').value;
  if (!name) {
    setSpecText(EXAMPLE);
    return;
  }
  const r = await getJson(`/v1/pipeline-specs/${encodeURIComponent(name)}`);
  setSpecText(r.spec);
  $('spec-name').value = name;
}

async function saveSpec() {
  const spec = parseSpec();
  if (!spec) return;
  const name = $('spec-name').value.trim();
  if (!name) {
    $('spec-error').textContent = 'Give the spec a name to save it as.';
    $('spec-name').focus();
    return;
  }
  try {
    await request(`/v1/pipeline-specs/${encodeURIComponent(name)}`, { method: 'PUT', body: spec });
  } catch (e) {
    if (e instanceof ApiError) return showServerFault(e);
    throw e;
  }
  await loadSpecNames();
  $('spec-saved').value = name;
  $('spec-error').textContent = '';
}

// ---- the graph -------------------------------------------------------------

// The spec's stages as [{agent}|{parallel: [names]}|{for_each, agent}|{rounds: [items], max_rounds}] (the three
// spec shapes).
export function stagesOf(spec) {
  const one = (s) => {
    if (typeof s === 'string') return { agent: s };
    if (s?.for_each) return { for_each: String(s.for_each), agent: String(s.agent) };
    if (s?.agent) return { agent: s.agent };
    if (Array.isArray(s?.parallel)) return { parallel: s.parallel.map(String) };
    if (Array.isArray(s?.rounds)) return { rounds: s.rounds.map(one), max_rounds: s.max_rounds, until: s.until };
    return { agent: String(s) };
  };
  if (Array.isArray(spec?.stages)) return spec.stages.map(one);
  const agents = (spec?.agents ?? []).map((a) => (typeof a === 'string' ? a : a?.name)).filter(Boolean);
  let items = [];
  if ((spec?.agents ?? []).every((a) => typeof a === 'string')) {  // config shape: consecutive executors in parallel
    const seen = new Map();
    const named = agents.map((n) => {
      const k = (seen.get(n) ?? 0) + 1;
      seen.set(n, k);
      return k > 1 ? `${n}_${k}` : n;
    });
    for (const n of named) {
      const last = items[items.length - 1];
      if (n.startsWith('executor') && last?.parallel) last.parallel.push(n);
      else if (n.startsWith('executor') && spec.enable_batch !== false) items.push({ parallel: [n] });
      else items.push({ agent: n });
    }
    items = items.map((it) => (it.parallel?.length === 1 ? { agent: it.parallel[0] } : it));
  } else {
    items = agents.map((n) => ({ agent: n }));
  }
  if ((spec?.max_rounds ?? 1) > 1) return [{ rounds: items, max_rounds: spec.max_rounds, until: spec.until }];
  return items;
}

// Stages guessed from a run's stored steps (GET /v1/pipelines/{id} has no spec): a step that started before
// every step of the current stage had finished runs beside them (a parallel stage); agents seen in a later
// round are boxed as rounds. Steps are listed in the order they started; pending ones come last.
export function stagesFromSteps(steps) {
  const rounds = new Map();
  for (const s of steps) rounds.set(s.name, Math.max(rounds.get(s.name) ?? 0, s.round ?? 1));
  const items = [];
  let col = null;
  for (const s of steps.filter((x) => (x.round ?? 1) === 1)) {
    const start = s.started_at ?? null;
    const sameStage = col && start != null && col.started && col.finished.every((f) => f == null || start < f);
    if (sameStage) {
      col.names.push(s.name);
    } else {
      col = { names: [s.name], started: start != null, finished: [] };
      items.push(col);
    }
    col.finished.push(s.finished_at ?? null);
  }
  const stage = (c) => (c.names.length > 1 ? { parallel: c.names } : { agent: c.names[0] });
  const repeated = (c) => c.names.some((n) => rounds.get(n) > 1);
  const first = items.findIndex(repeated);
  if (first < 0) return items.map(stage);
  const maxRound = Math.max(...rounds.values());
  return [...items.slice(0, first).map(stage), { rounds: items.slice(first).map(stage), max_rounds: maxRound, ran: true }];
}

function nodeElement(name) {
  const el = document.createElement('div');
  el.className = 'node queued';
  el.dataset.agent = name;
  el.innerHTML = '<header><span class="name"></span><span class="badge queued">queued</span></header>' +
    '<div class="figures"></div><div class="node-error"></div><div class="output"></div>';
  el.querySelector('.name').textContent = name;
  return el;
}

function drawGraph(items, nodes) {
  const build = (list, parent) => {
    list.forEach((it, k) => {
      if (k > 0) {
        const a = document.createElement('span');
        a.className = 'arrow';
        a.textContent = '→';
        parent.append(a);
      }
      if (it.rounds) {
        const box = document.createElement('div');
        box.className = 'rounds';
        const label = document.createElement('span');
        label.className = 'label';
        label.textContent = it.ran ? `rounds (ran ${it.max_rounds})`
          : `rounds ×${it.max_rounds ?? 1}${it.until ? ` until "${it.until}"` : ''}`;
        box.append(label);
        build(it.rounds, box);
        parent.append(box);
        return;
      }
      const col = document.createElement('div');
      col.className = 'stage';
      if (it.for_each) col.dataset.foreach = it.agent;  // its steps, agent[0], agent[1], ..., join this column
      for (const name of it.parallel ?? [it.agent]) {
        const node = { name, el: nodeElement(name), status: 'queued', output: '', tokens: 0, round: 1, attempts: 0 };
        nodes.set(name, node);
        col.append(node.el);
      }
      parent.append(col);
    });
  };
  const g = $('run-graph');
  g.replaceChildren();
  build(items, g);
}

const STATUS_LABEL = { pending: 'queued', running: 'running', retrying: 'retrying', done: 'done', failed: 'failed', skipped: 'skipped' };

function paintNode(node) {
  const el = node.el;
  const status = STATUS_LABEL[node.status] ?? node.status;
  el.className = `node ${status}`;
  el.dataset.status = status;
  const badge = el.querySelector('.badge');
  badge.className = `badge ${status}`;
  badge.textContent = status;
  const fig = [];
  if (node.tokens) fig.push(`${node.tokens} tokens`);
  if (node.seconds != null) fig.push(`${node.seconds.toFixed(2)} s`);
  else if (node.t0 && status === 'running') fig.push(`${((performance.now() - node.t0) / 1000).toFixed(1)} s`);
  if (node.attempts > 1) fig.push(`attempt ${node.attempts}`);
  if (node.round > 1) fig.push(`round ${node.round}`);
  el.querySelector('.figures').textContent = fig.join(' · ');
  el.querySelector('.node-error').textContent = node.error ?? '';
  if (node.painted !== node.output) {
    setMarkdown(el.querySelector('.output'), node.output);
    node.painted = node.output;
  }
}

function nodeFor(name) {
  let node = view.nodes.get(name);
  const element = /^(.+)\[\d+\]$/.exec(name);  // a step of a for_each stage: into its column, for the placeholder
  const forEach = element && [...$('run-graph').querySelectorAll('.stage[data-foreach]')].find((c) => c.dataset.foreach === element[1]);
  if (!node && forEach) {
    node = { name, el: nodeElement(name), status: 'queued', output: '', tokens: 0, round: 1, attempts: 0 };
    const placeholder = view.nodes.get(element[1]);
    if (placeholder) placeholder.el.hidden = true;
    forEach.append(node.el);
    view.nodes.set(name, node);
  }
  if (!node) {  // an agent the drawn stages do not show (e.g. a spec we never saw): add a column
    node = { name, el: nodeElement(name), status: 'queued', output: '', tokens: 0, round: 1, attempts: 0 };
    const col = document.createElement('div');
    col.className = 'stage';
    col.append(node.el);
    if (view.nodes.size) {
      const a = document.createElement('span');
      a.className = 'arrow';
      a.textContent = '→';
      $('run-graph').append(a);
    }
    $('run-graph').append(col);
    view.nodes.set(name, node);
  }
  return node;
}

// Applies GET /v1/pipelines/{id}'s steps (the latest round of each agent wins).
function applyRun(run) {
  view.status = run.status;
  paintTitle();
  for (const a of run.agents ?? []) {
    const node = nodeFor(a.name);
    if (a.round < node.round) continue;
    node.round = a.round;
    node.status = a.status;
    node.attempts = a.attempts ?? 0;
    node.tokens = a.tokens ?? 0;
    node.error = a.error ?? null;
    if (a.output != null) node.output = a.output;
    if (a.started_at && a.finished_at) node.seconds = a.finished_at - a.started_at;
    paintNode(node);
  }
}

function applyEvent(ev) {
  if (ev.type === 'done') {
    view.status = ev.status;
    paintTitle();
    return;
  }
  const node = nodeFor(ev.agent);
  if (ev.round && ev.round > node.round) node.round = ev.round;
  switch (ev.type) {
    case 'start':
      node.status = 'running';
      node.attempts = ev.attempt ?? 1;
      node.output = '';
      node.tokens = 0;
      node.error = null;
      node.seconds = null;
      node.t0 = performance.now();
      break;
    case 'token':
      node.output += ev.text ?? '';
      ++node.tokens;
      break;
    case 'output':
      node.status = 'done';
      node.output = ev.output ?? node.output;
      node.tokens = ev.tokens ?? node.tokens;
      if (node.t0) node.seconds = (performance.now() - node.t0) / 1000;
      break;
    case 'retry':
      node.status = 'retrying';
      node.error = `attempt ${ev.attempt} failed: ${ev.error}`;
      break;
    case 'failed':
      node.status = 'failed';
      node.error = ev.error;
      break;
    default:
      return;
  }
  paintNode(node);
}

function paintTitle() {
  const h = $('run-title');
  h.replaceChildren(`Run ${view.id} `);
  const b = document.createElement('span');
  b.className = `badge ${view.status}`;
  b.textContent = view.status;
  h.append(b);
  h.dataset.status = view.status;
  const active = view.status === 'queued' || view.status === 'running';
  $('run-cancel').disabled = !active;
}

async function refreshLog() {
  if (!view) return;
  const id = view.id;
  const r = await getJson(`/v1/pipelines/${id}/logs`);
  if (view?.id !== id) return;
  const pre = $('run-log');
  pre.textContent = r.data.join('\n');
  pre.scrollTop = pre.scrollHeight;
}

function scheduleLog() {
  clearTimeout(logTimer);
  logTimer = setTimeout(() => refreshLog().catch(() => {}), 250);
}

// Follows the run's events until it ends (reconnecting from the last event id).
async function follow(v) {
  let last = null;
  let ticking = setInterval(() => {
    for (const n of v.nodes.values()) if (n.status === 'running') paintNode(n);
  }, 500);
  try {
    while (view === v) {
      try {
        const qs = last ? `?last_event_id=${last}` : '';
        const res = await request(`/v1/pipelines/${v.id}/events${qs}`, { signal: v.controller.signal });
        let pending = false;
        for await (const ev of readEvents(res)) {
          if (ev.id) last = ev.id;
          const data = JSON.parse(ev.data);
          if (data.type === 'token') {  // batch repaints of streamed text
            const node = nodeFor(data.agent);
            node.output += data.text ?? '';
            ++node.tokens;
            if (!pending) {
              pending = true;
              requestAnimationFrame(() => { pending = false; paintNode(node); });
            }
            continue;
          }
          applyEvent(data);
          scheduleLog();
        }
        break;  // the stream ends after the run's "done"
      } catch (e) {
        if (e.name === 'AbortError' || view !== v) return;
        if (e instanceof ApiError) {  // the server answered (no such run, no key): retrying will not help
          showPageError(e);
          return;
        }
        await new Promise((r) => setTimeout(r, 1000));  // the connection dropped: resume after the last event
      }
    }
    if (view !== v) return;
    applyRun(await getJson(`/v1/pipelines/${v.id}`));
    await refreshLog();
    await loadRuns();
    $('run-graph').dataset.ended = '1';
  } finally {
    clearInterval(ticking);
  }
}

function rememberSpec(id, spec) {
  let m = {};
  try {
    m = JSON.parse(localStorage.getItem(RUN_SPECS) ?? '{}');
  } catch {
    m = {};
  }
  m[id] = spec;
  const ids = Object.keys(m);
  for (const old of ids.slice(0, Math.max(0, ids.length - 50))) delete m[old];
  localStorage.setItem(RUN_SPECS, JSON.stringify(m));
}

function specOf(id) {
  try {
    return JSON.parse(localStorage.getItem(RUN_SPECS) ?? '{}')[id] ?? null;
  } catch {
    return null;
  }
}

async function openRun(id) {
  view?.controller.abort();
  const v = { id, status: 'queued', nodes: new Map(), controller: new AbortController() };
  view = v;
  $('run-graph').dataset.ended = '';
  $('run-log').textContent = '';
  const spec = specOf(id);
  const run = await getJson(`/v1/pipelines/${id}`);
  if (view !== v) return;
  const known = spec ?? run.spec ?? null;  // this browser's copy, else the server's (runs started elsewhere)
  drawGraph(known ? stagesOf(known) : stagesFromSteps(run.agents ?? []), v.nodes);
  applyRun(run);
  await refreshLog();
  if (run.status === 'queued' || run.status === 'running') follow(v);
  else $('run-graph').dataset.ended = '1';
}

async function startRun() {
  const spec = parseSpec();
  if (!spec) return;
  const input = $('run-input').value;
  let r;
  try {
    r = await postJson('/v1/pipelines', input ? { ...spec, input } : spec);
  } catch (e) {
    if (e instanceof ApiError) return showServerFault(e);
    throw e;
  }
  rememberSpec(r.id, spec);
  const v = { id: r.id, status: r.status, nodes: new Map(), controller: new AbortController() };
  view?.controller.abort();
  view = v;
  $('run-graph').dataset.ended = '';
  $('run-log').textContent = '';
  drawGraph(stagesOf(spec), v.nodes);
  paintTitle();
  loadRuns().catch(() => {});
  follow(v);
}

async function cancelRun() {
  if (!view) return;
  $('run-cancel').disabled = true;
  applyRun(await postJson(`/v1/pipelines/${view.id}/cancel`, {}));
}

async function loadRuns(more = false) {
  const qs = more && lastRunId ? `&after=${lastRunId}` : '';
  const r = await getJson(`/v1/pipelines?limit=20${qs}`);
  const ul = $('run-list');
  if (!more) ul.replaceChildren();
  for (const run of r.data) {
    const li = document.createElement('li');
    const b = document.createElement('button');
    b.type = 'button';
    b.dataset.run = run.id;
    const when = new Date(run.created_at * 1000).toLocaleTimeString();
    b.textContent = `${run.name || run.id} · ${when} `;
    const badge = document.createElement('span');
    badge.className = `badge ${run.status}`;
    badge.textContent = run.status;
    b.append(badge);
    b.addEventListener('click', () => openRun(run.id).catch(showPageError));
    li.append(b);
    ul.append(li);
  }
  lastRunId = r.last_id;
  $('run-more').hidden = !r.has_more;
}

function showPageError(e) {
  $('spec-error').textContent = e.message;
}

export function start() {
  setSpecText(EXAMPLE);
  const ta = $('spec-text');
  ta.addEventListener('input', () => {
    paintGutter();
    clearTimeout(parseTimer);
    parseTimer = setTimeout(parseSpec, 400);
  });
  ta.addEventListener('scroll', () => { $('spec-gutter').scrollTop = ta.scrollTop; });
  ta.addEventListener('keydown', (ev) => {
    if (ev.key === 'Tab' && !ev.shiftKey && !ev.ctrlKey) {  // indent; Shift+Tab / Esc then Tab leave the editor
      if (ta.dataset.escaped) return;
      ev.preventDefault();
      ta.setRangeText('  ', ta.selectionStart, ta.selectionEnd, 'end');
      paintGutter();
    } else if (ev.key === 'Escape') {
      ta.dataset.escaped = '1';
    } else if (ev.key === 'Enter' && (ev.ctrlKey || ev.metaKey)) {
      ev.preventDefault();
      startRun().catch(showPageError);
    } else {
      delete ta.dataset.escaped;
    }
  });
  $('spec-error').addEventListener('click', () => {
    const off = $('spec-error').dataset.offset;
    if (off === '' || off == null) return;
    ta.focus();
    ta.setSelectionRange(Number(off), Number(off) + 1);
  });
  $('spec-load').addEventListener('click', () => loadSpec().catch(showPageError));
  $('spec-save').addEventListener('click', () => saveSpec().catch(showPageError));
  $('run-start').addEventListener('click', () => startRun().catch(showPageError));
  $('run-cancel').addEventListener('click', () => cancelRun().catch(showPageError));
  $('run-more').addEventListener('click', () => loadRuns(true).catch(showPageError));
  loadSpecNames().catch(showPageError);
  loadRuns().catch(showPageError);
}

export function show() {
  loadRuns().catch(showPageError);
}

export function stop() {
  view?.controller.abort();
  view = null;
}
