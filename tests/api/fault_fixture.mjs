// Shared by the storage-fault tests through `spool serve` (storage_faults and
// http_storage_faults): the streamed MoE fixture (deepseek3-fp8-tiny under a
// --mem-budget that leaves its experts in storage), its server flags, the
// request whose experts include the faulty one, the byte the faults target,
// and a prompt that never routes to that expert.
import path from 'node:path';
import { startServer, SHARED } from './helpers.mjs';
import { ggufTensors } from './gguf_tensors.mjs';

export const MODEL = path.join(SHARED, 'fixtures/gguf/deepseek3-fp8-tiny.f32.gguf');
export const ARGS = ['-c', '256', '-b', '16', '--mem-budget', process.env.SPOOL_FAULTS_MEM_BUDGET ?? '96M',
                     '--no-speculate'];
export const REQUEST = { prompt: [1, 200, 300, 400], max_tokens: 64, temperature: 0 };

// The last expert tensor in the file (the load reads only the resident set,
// not it) and the byte in its middle.
export function faultyExpert() {
  const tensors = ggufTensors(MODEL).filter((t) => t.name.includes('_exps'));
  const expert = tensors[tensors.length - 1];
  return { expert, mid: Math.floor((expert.begin + expert.end) / 2) };
}

// POST /v1/completions with REQUEST (fields of `extra` replace its own):
// { status, text, json } (json null when the body is not JSON).
export async function complete(s, extra = {}) {
  const r = await fetch(`${s.url}/v1/completions`, {
    method: 'POST', headers: { 'Content-Type': 'application/json' },
    body: JSON.stringify({ ...REQUEST, ...extra }),
  });
  const text = await r.text();
  let json = null;
  try {
    json = JSON.parse(text);
  } catch {}
  return { status: r.status, text, json };
}

// A one-token prompt whose 8-token greedy completion never reads the byte
// `mid` (found on a server where every read of it fails), with its text.
export async function promptAvoiding(mid) {
  const s = await startServer(MODEL, ARGS, { env: { SPOOL_STORAGE_FAULTS: `eio@${mid}-${mid + 1}#1000000` } });
  try {
    for (let t = 2; t < 2000; t += 7) {
      const r = await complete(s, { prompt: [t], max_tokens: 8 });
      if (r.status === 200) return { prompt: [t], max_tokens: 8, text: r.json.choices[0].text };
    }
    throw new Error('no prompt avoids the faulty expert');
  } finally {
    await s.stop();
  }
}
