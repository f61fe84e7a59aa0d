// The chat page: conversations kept in localStorage, a model picked from
// /v1/models, system prompt and sampling settings per conversation, replies
// streamed (fetch + SSE reader, so Stop aborts the request and the server
// cancels it) and rendered as sanitised markdown, with token counts and
// speed under each reply, copy and regenerate.
// A model with a chat template gets /v1/chat/completions; one without (e.g.
// stories260K) gets /v1/completions with the conversation as one text to
// continue: the system prompt and a blank line, then the turns, each user turn
// after the first on a new line (the first turn alone is exactly the prompt).
import { request, readEvents } from './api.js';
import { setMarkdown, copyText } from './markdown.js';

const $ = (id) => document.getElementById(id);
const STORE = 'spool.chats';

let models = [];
let chats = [];
let current = null;        // the conversation shown
let busy = null;           // {controller} while a reply streams

function load() {
  try {
    const v = JSON.parse(localStorage.getItem(STORE) ?? '[]');
    return Array.isArray(v) ? v.filter((c) => c && Array.isArray(c.messages)) : [];
  } catch {
    return [];
  }
}
const save = () => localStorage.setItem(STORE, JSON.stringify(chats));

function newChat() {
  const c = {
    id: `c${Date.now().toString(36)}${Math.random().toString(36).slice(2, 6)}`,
    title: 'New chat',
    model: models[0]?.id ?? '',
    system: '',
    settings: { temperature: 0.7, top_p: 1, max_tokens: 256, seed: '', ignore_eos: false },
    messages: [],
  };
  chats.unshift(c);
  save();
  return c;
}

const modelMeta = (id) => models.find((m) => m.id === id) ?? models[0];
const usesTemplate = (c) => Boolean(modelMeta(c.model)?.meta?.chat_template);

function settingsToForm(c) {
  const s = c.settings;
  if (!models.some((m) => m.id === c.model)) c.model = models[0]?.id ?? '';
  $('chat-model').value = c.model;
  $('chat-temperature').value = s.temperature;
  $('chat-top-p').value = s.top_p;
  $('chat-max-tokens').value = s.max_tokens;
  $('chat-seed').value = s.seed ?? '';
  $('chat-ignore-eos').checked = Boolean(s.ignore_eos);
  $('chat-system').value = c.system ?? '';
  showMode(c);
}

function formToSettings(c) {
  c.model = $('chat-model').value;
  c.system = $('chat-system').value;
  c.settings = {
    temperature: Number($('chat-temperature').value),
    top_p: Number($('chat-top-p').value),
    max_tokens: Math.max(1, Math.floor(Number($('chat-max-tokens').value) || 1)),
    seed: $('chat-seed').value,
    ignore_eos: $('chat-ignore-eos').checked,
  };
  showMode(c);
  save();
}

function showMode(c) {
  $('chat-mode').textContent = usesTemplate(c)
    ? `${c.model}: the model's chat template renders the conversation (/v1/chat/completions).`
    : `${c.model} has no chat template: the conversation is sent as one text for the model to continue (/v1/completions).`;
}

function renderList() {
  const ul = $('chat-list');
  ul.replaceChildren();
  for (const c of chats) {
    const li = document.createElement('li');
    li.classList.toggle('current', c === current);
    const open = document.createElement('button');
    open.type = 'button';
    open.className = 'open';
    open.textContent = c.title;
    open.addEventListener('click', () => select(c));
    const del = document.createElement('button');
    del.type = 'button';
    del.className = 'delete';
    del.textContent = '×';
    del.title = 'Delete this conversation';
    del.setAttribute('aria-label', `Delete ${c.title}`);
    del.addEventListener('click', () => remove(c));
    li.append(open, del);
    ul.append(li);
  }
}

function select(c) {
  if (busy) return;
  current = c;
  settingsToForm(c);
  renderList();
  renderMessages();
}

function remove(c) {
  if (busy && c === current) return;
  chats = chats.filter((x) => x !== c);
  if (!chats.length) newChat();
  save();
  select(c === current ? chats[0] : current);
}

function statsText(st) {
  if (!st) return '';
  const parts = [];
  parts.push(`${st.approx ? '~' : ''}${st.tokens} token${st.tokens === 1 ? '' : 's'}`);
  if (st.tps) parts.push(`${st.tps.toFixed(1)} tok/s`);
  if (st.ttft_ms != null) parts.push(`first token ${Math.round(st.ttft_ms)} ms`);
  if (st.prompt_tokens != null) parts.push(`prompt ${st.prompt_tokens}`);
  if (st.finish) parts.push(st.finish);
  return parts.join(' · ');
}

function messageElement(m, index) {
  const div = document.createElement('div');
  div.className = `msg ${m.role}`;
  div.dataset.index = index;
  const body = document.createElement('div');
  body.className = 'body';
  div.append(body);
  if (m.role === 'user') {
    body.textContent = m.content;
    return div;
  }
  if (m.error) div.classList.add('error');
  if (m.stats) {  // what the page saw of the stream (the browser tests read these)
    div.dataset.chunks = m.stats.chunks ?? 0;
    div.dataset.finish = m.stats.finish ?? '';
  }
  const meta = document.createElement('div');
  meta.className = 'meta';
  div.append(meta);
  fillAssistant(div, m, index);
  return div;
}

function fillAssistant(div, m, index) {
  const body = div.querySelector('.body');
  if (m.error) body.textContent = m.error;
  else setMarkdown(body, m.content);
  const meta = div.querySelector('.meta');
  meta.replaceChildren();
  const stats = document.createElement('span');
  stats.className = 'stats';
  stats.textContent = statsText(m.stats);
  meta.append(stats);
  if (m.streaming) return;
  const copy = document.createElement('button');
  copy.type = 'button';
  copy.textContent = 'Copy';
  copy.className = 'copy';
  copy.addEventListener('click', () => copyText(m.content, copy));
  meta.append(copy);
  if (index === current.messages.length - 1) {
    const regen = document.createElement('button');
    regen.type = 'button';
    regen.textContent = 'Regenerate';
    regen.className = 'regenerate';
    regen.addEventListener('click', regenerate);
    meta.append(regen);
  }
}

function renderMessages() {
  const box = $('chat-messages');
  box.replaceChildren(...current.messages.map((m, i) => messageElement(m, i)));
  box.scrollTop = box.scrollHeight;
}

// The request for the reply to `c.messages` (which ends with a user turn).
function buildRequest(c) {
  const s = c.settings;
  const body = {
    model: c.model,
    stream: true,
    stream_options: { include_usage: true },
    temperature: s.temperature,
    top_p: s.top_p,
    max_tokens: s.max_tokens,
  };
  if (s.seed !== '' && s.seed != null) body.seed = Number(s.seed);
  if (s.ignore_eos) body.ignore_eos = true;
  const turns = c.messages.filter((m) => !m.error);
  if (usesTemplate(c)) {
    body.messages = [...(c.system ? [{ role: 'system', content: c.system }] : []),
      ...turns.map((m) => ({ role: m.role, content: m.content }))];
    return { path: '/v1/chat/completions', body };
  }
  let prompt = c.system ? `${c.system}\n\n` : '';
  turns.forEach((m, i) => {
    if (m.role === 'user' && i > 0) prompt += '\n';
    prompt += m.content;
  });
  body.prompt = prompt;
  return { path: '/v1/completions', body };
}

function setBusy(b) {
  busy = b;
  $('chat-send').disabled = Boolean(b);
  $('chat-stop').hidden = !b;
  $('chat-new').disabled = Boolean(b);
}

async function generate() {
  const c = current;
  const { path, body } = buildRequest(c);
  const m = { role: 'assistant', content: '', streaming: true };
  c.messages.push(m);
  const index = c.messages.length - 1;
  const div = messageElement(m, index);
  div.classList.add('streaming');
  $('chat-messages').append(div);
  const controller = new AbortController();
  setBusy({ controller });
  const t0 = performance.now();
  let tFirst = null, tLast = null, chunks = 0, usage = null, finish = null, pending = false;
  const paint = () => {
    pending = false;
    setMarkdown(div.querySelector('.body'), m.content);
    div.dataset.chunks = chunks;
    const box = $('chat-messages');
    box.scrollTop = box.scrollHeight;
  };
  try {
    const res = await request(path, { method: 'POST', body, signal: controller.signal });
    for await (const ev of readEvents(res)) {
      if (ev.data === '[DONE]') break;
      const j = JSON.parse(ev.data);
      if (j.error) throw new Error(j.error.message);
      if (j.usage) usage = j.usage;
      const choice = j.choices?.[0];
      if (!choice) continue;
      const text = choice.delta?.content ?? choice.text ?? '';
      if (choice.finish_reason) finish = choice.finish_reason;
      if (!text) continue;
      tLast = performance.now();
      tFirst ??= tLast;
      m.content += text;
      ++chunks;
      if (!pending) {
        pending = true;
        requestAnimationFrame(paint);
      }
    }
  } catch (e) {
    if (e.name === 'AbortError') finish = 'stopped';
    else m.error = `Error: ${e.message}`;
  }
  const tokens = usage?.completion_tokens ?? chunks;
  // From sending to the last token: chunks arrive in bursts, so first-to-last alone can be a fraction of a millisecond.
  const seconds = tLast != null && tLast > t0 ? (tLast - t0) / 1000 : 0;
  m.stats = {
    tokens,
    approx: !usage,
    prompt_tokens: usage?.prompt_tokens ?? null,
    tps: seconds > 0 ? tokens / seconds : null,
    ttft_ms: tFirst != null ? tFirst - t0 : null,
    finish,
    chunks,
  };
  delete m.streaming;
  setBusy(null);
  save();
  if (current === c) renderMessages();
}

function send() {
  const text = $('chat-input').value;
  if (busy || !text.trim()) return;
  formToSettings(current);
  if (current.messages.length === 0) current.title = text.trim().slice(0, 40);
  current.messages.push({ role: 'user', content: text });
  $('chat-input').value = '';
  save();
  renderList();
  renderMessages();
  generate();
}

function regenerate() {
  if (busy) return;
  const last = current.messages[current.messages.length - 1];
  if (!last || last.role !== 'assistant') return;
  current.messages.pop();
  formToSettings(current);
  renderMessages();
  generate();
}

export function start(modelList) {
  models = modelList;
  const sel = $('chat-model');
  sel.replaceChildren(...models.map((m) => new Option(m.id, m.id)));
  chats = load();
  current = chats[0] ?? newChat();
  select(current);
  $('chat-form').addEventListener('submit', (ev) => {
    ev.preventDefault();
    send();
  });
  $('chat-input').addEventListener('keydown', (ev) => {
    if (ev.key === 'Enter' && !ev.shiftKey && !ev.isComposing) {
      ev.preventDefault();
      send();
    }
  });
  addEventListener('keydown', (ev) => {
    if (ev.key === 'Escape' && busy) busy.controller.abort();
  });
  $('chat-stop').addEventListener('click', () => busy?.controller.abort());
  $('chat-new').addEventListener('click', () => {
    if (!busy) select(newChat());
  });
  for (const id of ['chat-model', 'chat-temperature', 'chat-top-p', 'chat-max-tokens', 'chat-seed', 'chat-ignore-eos', 'chat-system'])
    $(id).addEventListener('change', () => formToSettings(current));
  if (matchMedia('(max-width: 760px)').matches) $('chat-settings').open = false;  // a phone: room for the talk
  else $('chat-input').focus();
}

export function show() {
  $('chat-input').focus();
}

export function stop() {
  busy?.controller.abort();
}
