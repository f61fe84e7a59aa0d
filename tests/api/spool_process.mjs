// Starting and stopping a real `spool serve` (on a free loopback port: --port
// 0, the port read from its start-up line), running `spool` commands, and a
// chat-template fixture, with no npm dependency: shared by the API tests (helpers.mjs) and the browser
// tests (tests/ui). SPOOL_BIN and SPOOL_SHARED_DIR come from CTest; the
// defaults fit a checkout with build/.
import { spawn, execFile } from 'node:child_process';
import { mkdtempSync, symlinkSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const here = path.dirname(fileURLToPath(import.meta.url));
export const SPOOL_BIN = process.env.SPOOL_BIN ?? path.resolve(here, '../../build/spool');
export const SHARED = process.env.SPOOL_SHARED_DIR ?? path.resolve(here, '../../../shared');
export const STORIES = path.join(SHARED, 'models/stories260K.gguf');

// Starts `spool serve -m model --port 0 ...args`; resolves once it listens.
// Without --data-dir in args each server gets its own temp data dir (removed
// when it stops), as two servers may not share one. `launcher` (e.g. mpirun
// and its arguments) goes before the spool binary.
export function startServer(model, args = [], { timeoutMs = 30000, env = {}, launcher = [] } = {}) {
  let ownDir = null;
  if (!args.includes('--data-dir')) {
    ownDir = mkdtempSync(path.join(tmpdir(), 'spool-data-'));
    args = [...args, '--data-dir', ownDir];
  }
  const argv = [SPOOL_BIN, 'serve', '-m', model, '--port', '0', '-t', '1', ...args];
  const proc = spawn(launcher.length ? launcher[0] : argv[0], [...launcher.slice(1), ...argv.slice(launcher.length ? 0 : 1)], {
    stdio: ['ignore', 'ignore', 'pipe'],
    env: { ...process.env, ...env },
  });
  if (ownDir) proc.on('exit', () => rmSync(ownDir, { recursive: true, force: true }));
  let stderr = '';
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => {
      proc.kill('SIGKILL');
      reject(new Error(`spool serve did not start in ${timeoutMs} ms:\n${stderr}`));
    }, timeoutMs);
    let listening = false;
    proc.on('exit', (code) => {
      if (listening) return;
      clearTimeout(timer);
      reject(new Error(`spool serve exited with ${code} before listening:\n${stderr}`));
    });
    proc.stderr.on('data', (d) => {
      stderr += d;
      const m = /serving '([^']*)'(?:, '[^']*')* on http:\/\/([^:\s]+):(\d+)/.exec(stderr);
      if (!m || listening) return;
      listening = true;
      clearTimeout(timer);
      const url = `http://${m[2]}:${m[3]}`;
      resolve({
        proc,
        url,
        modelId: m[1],
        stderr: () => stderr,
        stop: async () => {
          const code = await stopProcess(proc);
          // Sanitizer builds (ctest sets SPOOL_SANITIZED): a report at exit
          // (LeakSanitizer, or an error on the shutdown path) fails the test.
          if (process.env.SPOOL_SANITIZED && (code !== 0 || /Sanitizer|runtime error:/.test(stderr)))
            throw new Error(`spool serve exited with ${code} under the sanitizers:\n` +
                            stderr.slice(Math.max(0, stderr.search(/WARNING: |ERROR: |runtime error:/)), 12000));
          return code;
        },
      });
    });
  });
}

export function stopProcess(proc) {
  if (proc.exitCode !== null || proc.signalCode !== null) return Promise.resolve(proc.exitCode);
  return new Promise((resolve) => {
    const killer = setTimeout(() => proc.kill('SIGKILL'), 10000);
    proc.on('exit', (code, signal) => {
      clearTimeout(killer);
      resolve(code ?? signal);
    });
    proc.kill('SIGTERM');
  });
}

// Runs `spool <args>`; resolves { code, stdout, stderr }.
export function runSpool(args, { timeoutMs = 60000 } = {}) {
  return new Promise((resolve) => {
    execFile(SPOOL_BIN, args, { timeout: timeoutMs, maxBuffer: 1 << 24 }, (err, stdout, stderr) => {
      resolve({ code: err ? (err.code ?? 1) : 0, stdout, stderr });
    });
  });
}

// A temp HF checkpoint: the qwen2-tiny fixture plus a Qwen2 chat template
// (chat_template.jinja from the tok-qwen2 fixture); remove() deletes it.
export function qwen2TinyWithTemplate(template = path.join(SHARED, 'fixtures/tok-qwen2/chat_template.jinja')) {
  const dir = mkdtempSync(path.join(tmpdir(), 'spool-api-'));
  const src = path.join(SHARED, 'fixtures/qwen2-tiny');
  for (const f of ['config.json', 'model.safetensors', 'tokenizer.json', 'tokenizer_config.json']) {
    symlinkSync(path.join(src, f), path.join(dir, f));
  }
  symlinkSync(template, path.join(dir, 'chat_template.jinja'));
  return { dir, remove: () => rmSync(dir, { recursive: true, force: true }) };
}
