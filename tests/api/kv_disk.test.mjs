// The KV disk tier across kill -9, through the official openai client: a
// three-turn Responses conversation (previous_response_id) on qwen2-tiny, the
// server killed (SIGKILL) between turns 2 and 3 and started again on the same
// data dir. Turn 3's text equals that of a server that never restarted
// (temperature 0), and its cached tokens cover the conversation so far but at
// most one block: read from disk, not recomputed (/metrics). A server with
// --no-kv-disk writes nothing there.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import path from 'node:path';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { fileURLToPath } from 'node:url';
import { startServer, qwen2TinyWithTemplate, metric, waitFor } from './helpers.mjs';

const here = path.dirname(fileURLToPath(import.meta.url));
const BLOCK = 16;  // KV positions per block (the engine's default)

let model;
before(() => {
  model = qwen2TinyWithTemplate(path.join(here, 'fixtures/tools_chat_template.jinja'));
});
after(() => model?.remove());

const turn = (input, extra = {}) => ({ input, max_output_tokens: 24, temperature: 0, ...extra });
const exited = (proc) => new Promise((resolve) => {
  if (proc.exitCode !== null || proc.signalCode !== null) resolve();
  else proc.on('exit', () => resolve());
});

test('a conversation continues after kill -9 with its KV read from disk and the same text', async () => {
  // The reference: one server, never restarted, no disk tier.
  const refDir = mkdtempSync(path.join(tmpdir(), 'spool-kvref-'));
  const ref = await startServer(model.dir, ['-c', '1024', '--no-kv-disk', '--data-dir', refDir]);
  let a1, a2, a3;
  try {
    const rc = ref.client();
    a1 = await rc.responses.create(turn('Hello, who are you?'));
    a2 = await rc.responses.create(turn('Tell me more.', { previous_response_id: a1.id }));
    a3 = await rc.responses.create(turn('And then?', { previous_response_id: a2.id }));
    assert.equal(await metric(ref.url, 'spool_kv_disk_enabled'), 0);
  } finally {
    await ref.stop();
  }
  assert.ok(!existsSync(path.join(refDir, 'kv')), '--no-kv-disk wrote a kv directory');
  rmSync(refDir, { recursive: true, force: true });

  const dataDir = mkdtempSync(path.join(tmpdir(), 'spool-kvdisk-'));
  let s = await startServer(model.dir, ['-c', '1024', '--data-dir', dataDir]);
  try {
    let c = s.client();
    assert.equal(await metric(s.url, 'spool_kv_disk_enabled'), 1);
    const r1 = await c.responses.create(turn('Hello, who are you?'));
    const r2 = await c.responses.create(turn('Tell me more.', { previous_response_id: r1.id }));
    assert.equal(r1.output_text, a1.output_text);
    assert.equal(r2.output_text, a2.output_text);
    // Blocks are written in the background as they fill; once none is queued, kill -9.
    assert.ok(await waitFor(async () => (await metric(s.url, 'spool_kv_disk_pending_writes')) === 0));
    assert.ok(await metric(s.url, 'spool_kv_disk_written_bytes_total') > 0);
    s.proc.kill('SIGKILL');
    await exited(s.proc);

    s = await startServer(model.dir, ['-c', '1024', '--data-dir', dataDir]);
    c = s.client();
    assert.equal(await metric(s.url, 'spool_kv_disk_hit_tokens_total'), 0);
    const r3 = await c.responses.create(turn('And then?', { previous_response_id: r2.id }));
    assert.equal(r3.output_text, a3.output_text);
    assert.ok(r3.output_text.length > 0);
    const sofar = r2.usage.input_tokens + r2.usage.output_tokens;
    assert.ok(sofar > 3 * BLOCK, `a conversation of ${sofar} tokens is too short to show anything`);
    const cached = r3.usage.input_tokens_details.cached_tokens;
    assert.ok(cached >= sofar - BLOCK, `cached ${cached} of a conversation of ${sofar} tokens`);
    assert.equal(r3.usage.input_tokens, a3.usage.input_tokens);
    // Nothing was in memory after the restart: the cached tokens came from disk.
    assert.ok(await metric(s.url, 'spool_kv_disk_hit_tokens_total') >= cached);
    assert.ok(await metric(s.url, 'spool_kv_disk_loaded_bytes_total') > 0);
    assert.equal(await metric(s.url, 'spool_kv_disk_rejected_total'), 0);
  } finally {
    await s.stop();
    rmSync(dataDir, { recursive: true, force: true });
  }
});
