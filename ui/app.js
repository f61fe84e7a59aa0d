// The page's entry point: theme, the API-key gate, and the hash router that
// shows one of the three pages. No page is built and no data is fetched until
// GET /v1/models answers (with the key when the server has one).
import { getJson, apiKey, setApiKey, onAuthFailure, AuthError } from './api.js';
import * as chat from './chat.js';
import * as pipelines from './pipelines.js';
import * as engine from './engine.js';

const $ = (id) => document.getElementById(id);
const PAGES = { chat, pipelines, engine };
let models = null;       // /v1/models data once authorised
let current = null;      // name of the page shown
const started = new Set();

function applyTheme(theme) {
  const t = theme ?? (matchMedia('(prefers-color-scheme: dark)').matches ? 'dark' : 'light');
  document.documentElement.dataset.theme = t;
}

function showLogin(message) {
  models = null;
  for (const name of Object.keys(PAGES)) {
    $(`page-${name}`).hidden = true;
    if (started.has(name)) PAGES[name].stop?.();
  }
  current = null;
  $('nav').hidden = true;
  $('logout').hidden = true;
  $('login').hidden = false;
  $('login-error').textContent = message ?? '';
  $('login-key').value = '';
  $('login-key').focus();
}

function route() {
  if (!models) return;
  const name = (location.hash.match(/^#\/(\w+)/) ?? [])[1];
  const page = PAGES[name] ? name : 'chat';
  if (current && current !== page) PAGES[current].hide?.();
  for (const n of Object.keys(PAGES)) $(`page-${n}`).hidden = n !== page;
  for (const a of document.querySelectorAll('#nav a')) a.classList.toggle('active', a.dataset.page === page);
  current = page;
  if (!started.has(page)) {
    started.add(page);
    PAGES[page].start(models);
  } else {
    PAGES[page].show?.(models);
  }
  document.title = `spool · ${page}`;
}

async function connect() {
  try {
    const r = await getJson('/v1/models');
    models = r.data;
  } catch (e) {
    if (e instanceof AuthError) {
      showLogin(apiKey() ? 'That key was refused.' : '');
      if (apiKey()) setApiKey('');
      return;
    }
    $('status-line').textContent = `Cannot reach the server: ${e.message}`;
    return;
  }
  $('status-line').textContent = '';
  $('login').hidden = true;
  $('nav').hidden = false;
  $('logout').hidden = !apiKey();
  route();
  document.body.dataset.readyMs = String(Math.round(performance.now()));
  document.body.dataset.ready = '1';
}

function init() {
  applyTheme(localStorage.getItem('spool.theme'));
  $('theme-toggle').addEventListener('click', () => {
    const next = document.documentElement.dataset.theme === 'dark' ? 'light' : 'dark';
    localStorage.setItem('spool.theme', next);
    applyTheme(next);
    for (const name of started) PAGES[name].themeChanged?.();
  });
  $('login-form').addEventListener('submit', (ev) => {
    ev.preventDefault();
    setApiKey($('login-key').value.trim());
    $('login-error').textContent = '';
    connect();
  });
  $('logout').addEventListener('click', () => {
    setApiKey('');
    showLogin('');
  });
  onAuthFailure(() => {
    if (models) {
      setApiKey('');
      showLogin('The server refused the key; enter it again.');
    }
  });
  addEventListener('hashchange', route);
  // Alt+1/2/3 switch pages.
  addEventListener('keydown', (ev) => {
    if (!ev.altKey || !models) return;
    const page = { 1: 'chat', 2: 'pipelines', 3: 'engine' }[ev.key];
    if (page) {
      location.hash = `#/${page}`;
      ev.preventDefault();
    }
  });
  connect();
}

init();
