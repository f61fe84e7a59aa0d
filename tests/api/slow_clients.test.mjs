// Slow clients against a real `spool serve`: 150 connections each send half a
// request header and then nothing. A normal request made meanwhile is answered
// within 1 s of what the same request takes with no slow clients (each
// connection has its own worker up to --max-connections; the baseline keeps the
// test honest on a loaded CI machine), and the server closes every slow
// connection once --read-timeout passes.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import net from 'node:net';
import { startServer, STORIES } from './helpers.mjs';

const N_SLOW = 150;
const READ_TIMEOUT_S = 2;
let server;
before(async () => {
  server = await startServer(STORIES, ['-c', '128', '--read-timeout', String(READ_TIMEOUT_S)]);
});
after(async () => server && (await server.stop()));

// Opens a connection that sends the first half of a request header; resolves
// once it is connected, with a promise of when the server closes it.
function halfHeader(url) {
  const { hostname, port } = new URL(url);
  return new Promise((resolve, reject) => {
    const sock = net.connect({ host: hostname, port: Number(port) }, () => {
      sock.write('POST /v1/completions HTTP/1.1\r\nHost: localhost\r\nContent-Ty');
      sock.on('data', () => {});  // read the server's 400 so that its close is seen
      const closed = new Promise((r) => sock.on('close', () => r(Date.now())));
      resolve({ sock, closed });
    });
    sock.on('error', () => {});  // a reset by the server counts as closed
    sock.setTimeout(30000, () => reject(new Error('no close from the server in 30 s')));
  });
}

// One normal completion; resolves with its time in ms.
async function timedCompletion() {
  const t0 = Date.now();
  const r = await fetch(`${server.url}/v1/completions`, {
    method: 'POST',
    headers: { 'Content-Type': 'application/json' },
    body: JSON.stringify({ prompt: 'Once upon a time', max_tokens: 4, temperature: 0 }),
  });
  const body = await r.json();
  assert.equal(r.status, 200);
  assert.equal(body.usage.completion_tokens, 4);
  return Date.now() - t0;
}

test('a normal request is answered within 1 s while 150 clients hold half a header', async () => {
  const base = Math.max(await timedCompletion(), await timedCompletion(), await timedCompletion());
  const slow = await Promise.all(Array.from({ length: N_SLOW }, () => halfHeader(server.url)));
  const opened = Date.now();
  await new Promise((r) => setTimeout(r, 300));  // every slow connection is now read by a worker

  const ms = await timedCompletion();
  assert.ok(ms < base + 1000, `normal request took ${ms} ms with slow clients, ${base} ms without`);

  // The slow ones are dropped by the read timeout (not before it): each gets a 400 and
  // its connection is closed (a header that never completed ends the connection).
  const closedAt = await Promise.all(slow.map((s) => s.closed));
  const last = Math.max(...closedAt) - opened, first = Math.min(...closedAt) - opened;
  assert.ok(first >= READ_TIMEOUT_S * 1000 - 500, `a slow client was closed after ${first} ms`);
  assert.ok(last <= READ_TIMEOUT_S * 1000 + 2000 + 3000, `the last slow client was closed after ${last} ms`);
  const health = await fetch(`${server.url}/health`);
  assert.equal(health.status, 200);
});
