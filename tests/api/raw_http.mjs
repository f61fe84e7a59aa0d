// Raw HTTP/1.1 over node:net, for requests no HTTP client would send (huge or
// endless headers, a long URI, invalid bytes in a body) and for connections
// held open or dropped on purpose. Shared by the reliability tests.
import net from 'node:net';

// Sends `data` (string or Buffer) on a new connection and reads until the
// server closes it or `timeoutMs` passes. Resolves { status, headers, body,
// json, raw, error }: status 0 when no status line came (closed or reset
// first; `error` says which).
export function rawRequest(url, data, { timeoutMs = 15000, chunks = null } = {}) {
  const { hostname, port } = new URL(url);
  return new Promise((resolve) => {
    const got = [];
    let error = null, done = false;
    const sock = net.connect({ host: hostname, port: Number(port) }, async () => {
      try {
        if (chunks) {
          for (const c of chunks) {
            if (sock.destroyed) break;
            sock.write(c);
            await new Promise((r) => setImmediate(r));
          }
        } else {
          sock.write(data);
        }
      } catch (e) {
        error = e;
      }
    });
    const finish = () => {
      if (done) return;
      done = true;
      clearTimeout(timer);
      resolve(parseResponse(Buffer.concat(got), error));
    };
    const timer = setTimeout(() => {
      error = error ?? new Error(`no close within ${timeoutMs} ms`);
      sock.destroy();
      finish();
    }, timeoutMs);
    sock.on('data', (d) => got.push(d));
    sock.on('error', (e) => { error = error ?? e; });
    sock.on('close', finish);
  });
}

export function parseResponse(buf, error = null) {
  const raw = buf.toString('latin1');
  const m = /^HTTP\/1\.[01] (\d{3})[^\r\n]*\r\n/.exec(raw);
  if (!m) return { status: 0, headers: {}, body: '', json: null, raw, error };
  const end = raw.indexOf('\r\n\r\n');
  const headers = {};
  for (const line of raw.slice(m[0].length, end).split('\r\n')) {
    const i = line.indexOf(':');
    if (i > 0) headers[line.slice(0, i).trim().toLowerCase()] = line.slice(i + 1).trim();
  }
  let body = end >= 0 ? buf.subarray(end + 4).toString('utf8') : '';
  if (/chunked/i.test(headers['transfer-encoding'] ?? '')) body = dechunk(body);
  let json = null;
  try {
    json = JSON.parse(body);
  } catch {}
  return { status: Number(m[1]), headers, body, json, raw, error };
}

function dechunk(s) {
  let out = '', i = 0;
  for (;;) {
    const nl = s.indexOf('\r\n', i);
    if (nl < 0) break;
    const n = parseInt(s.slice(i, nl), 16);
    if (!(n > 0)) break;
    out += s.slice(nl + 2, nl + 2 + n);
    i = nl + 2 + n + 2;
  }
  return out;
}

// A request with `Connection: close`, so the read ends when the answer does.
export function httpText(method, path, { headers = {}, body = null } = {}) {
  const lines = [`${method} ${path} HTTP/1.1`, 'Host: localhost', 'Connection: close'];
  for (const [k, v] of Object.entries(headers)) lines.push(`${k}: ${v}`);
  const b = body === null ? null : Buffer.isBuffer(body) ? body : Buffer.from(body, 'utf8');
  if (b) lines.push(`Content-Length: ${b.length}`);
  const head = Buffer.from(lines.join('\r\n') + '\r\n\r\n', 'latin1');
  return b ? Buffer.concat([head, b]) : head;
}

// Opens a connection and keeps it open, sending nothing (or `prefix`);
// resolves once connected with { sock, closed: Promise<ms timestamp>, data() }.
export function holdOpen(url, prefix = '') {
  const { hostname, port } = new URL(url);
  return new Promise((resolve, reject) => {
    const got = [];
    const sock = net.connect({ host: hostname, port: Number(port) }, () => {
      if (prefix) sock.write(prefix);
      const closed = new Promise((r) => sock.on('close', () => r(Date.now())));
      resolve({ sock, closed, data: () => Buffer.concat(got).toString('latin1') });
    });
    sock.on('data', (d) => got.push(d));
    sock.on('error', () => {});
    setTimeout(() => reject(new Error('connect timed out')), 10000).unref();
  });
}

// Parses Prometheus text into { name_with_labels: value }.
export async function metrics(url) {
  const text = await (await fetch(`${url}/metrics`)).text();
  const out = {};
  for (const line of text.split('\n')) {
    if (!line || line.startsWith('#')) continue;
    const i = line.lastIndexOf(' ');
    out[line.slice(0, i)] = Number(line.slice(i + 1));
  }
  return out;
}

// Waits until /health is ok and /metrics shows no KV block held and no request
// running or waiting; throws with the last figures otherwise.
export async function assertQuiet(url, { timeoutMs = 10000 } = {}) {
  const end = Date.now() + timeoutMs;
  let last = null;
  for (;;) {
    try {
      const h = await fetch(`${url}/health`);
      const m = await metrics(url);
      last = { health: h.status, used: m.spool_kv_blocks_used, running: m.spool_requests_running,
               waiting: m.spool_requests_waiting };
      if (h.status === 200 && last.used === 0 && last.running === 0 && last.waiting === 0) return m;
    } catch (e) {
      last = { error: String(e) };
    }
    if (Date.now() > end) throw new Error(`server not quiet after ${timeoutMs} ms: ${JSON.stringify(last)}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}
