// `spool serve --dist ep` under a real mpirun with 4 ranks (ctest dist_api,
// where MPI was found): the official openai client and four agents at once,
// each a few turns that feed its previous answer back, get exactly the text one
// process gives; /metrics and /v1/stats show every rank; a rank killed while a
// request streams ends the job: the request gets an error event (not a cut
// connection) and mpirun names the rank.
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { startServer, metric, SHARED } from './helpers.mjs';

const MPIRUN = process.env.SPOOL_MPIRUN ?? 'mpirun';
const MODEL = path.join(SHARED, 'fixtures/gguf/deepseek3-tiny.q8_0.gguf');
const RANKS = 4;
const env = { OMPI_ALLOW_RUN_AS_ROOT: '1', OMPI_ALLOW_RUN_AS_ROOT_CONFIRM: '1' };
// mpirun ends a job whose rank died with SIGTERM to the others, then SIGKILL, each after
// odls_base_sigkill_timeout seconds (1 by default): 3 leaves the home rank time to fail its
// requests on a loaded machine (DISTRIBUTED.md).
const launcher = [MPIRUN, '--oversubscribe', '--mca', 'odls_base_sigkill_timeout', '3', '-np', String(RANKS)];
const servers = [];
const dirs = [];
after(async () => {
  await Promise.all(servers.map((s) => s.stop().catch(() => {})));
  for (const d of dirs) rmSync(d, { recursive: true, force: true });
});

function dataDir() {
  const d = mkdtempSync(path.join(tmpdir(), 'spool-dist-'));
  dirs.push(d);
  return d;
}

// An agent: three turns, each prompt the last one plus its answer and a new step.
async function agent(client, seed) {
  let prompt = seed;
  const answers = [];
  for (let turn = 1; turn <= 3; ++turn) {
    const r = await client.completions.create({ prompt, max_tokens: 12, temperature: 0, ignore_eos: true });
    assert.equal(r.usage.completion_tokens, 12);
    answers.push(r.choices[0].text);
    prompt += `${r.choices[0].text}\nstep ${turn}:`;
  }
  return answers;
}

const SEEDS = ['Plan the trip:', 'Summarize the report.', 'def add(a, b):', 'Once upon a time'];

// The pid of MPI rank `rank` of the server whose command line names `dir`.
function rankPid(rank, dir) {
  for (const p of readdirSync('/proc')) {
    if (!/^\d+$/.test(p)) continue;
    try {
      const cmd = readFileSync(`/proc/${p}/cmdline`, 'utf8');
      if (!cmd.includes(dir) || !cmd.includes('serve')) continue;
      const environ = readFileSync(`/proc/${p}/environ`, 'utf8').split('\0');
      if (environ.includes(`OMPI_COMM_WORLD_RANK=${rank}`)) return Number(p);
    } catch {
      // gone, or not ours to read
    }
  }
  return null;
}

test(`${RANKS} ranks: four agents at once get one process's answers; every rank in /metrics and /v1/stats`, async () => {
  const one = await startServer(MODEL, ['--parallel', '4']);
  servers.push(one);
  const want = [];
  for (const s of SEEDS) want.push(await agent(one.client(), s));
  await one.stop();

  const dist = await startServer(MODEL, ['--parallel', '4', '--dist', 'ep'], { launcher, env, timeoutMs: 60000 });
  servers.push(dist);
  const client = dist.client();
  const got = await Promise.all(SEEDS.map((s) => agent(client, s)));
  assert.deepEqual(got, want);

  assert.equal(await metric(dist.url, 'spool_dist_ranks'), RANKS);
  assert.ok((await metric(dist.url, 'spool_dist_messages_total')) > 0);
  assert.ok((await metric(dist.url, 'spool_dist_sent_bytes_total')) > 0);
  assert.ok((await metric(dist.url, 'spool_dist_network_seconds_total')) >= 0);
  let answers = 0;
  for (let r = 1; r < RANKS; ++r) answers += await metric(dist.url, `spool_dist_rank_answers_total{rank="${r}"}`);
  assert.equal(answers, await metric(dist.url, 'spool_dist_messages_total'));

  const stats = await (await fetch(`${dist.url}/v1/stats`)).json();
  const d = stats.models[0].dist;
  assert.equal(d.ranks, RANKS);
  assert.deepEqual(d.rank.map((r) => r.rank), [1, 2, 3]);
  for (const r of d.rank) {
    assert.ok(r.host.length > 0);
    assert.ok(r.answers > 0, `rank ${r.rank} answered nothing`);
  }
  assert.ok(d.tokens >= SEEDS.length * 3 * 12);
  assert.equal(typeof d.network_seconds_per_token, 'number');
  assert.ok(d.expert_jobs > d.expert_jobs_home);
});

test('a rank killed while a request streams: the request ends with an error, mpirun names the rank', async () => {
  const dir = dataDir();
  const server = await startServer(MODEL, ['--dist', 'ep', '--data-dir', dir], { launcher, env, timeoutMs: 60000 });
  servers.push(server);
  const victim = rankPid(2, dir);
  assert.ok(victim, 'rank 2 not found');
  const stream = await server.client().completions.create({
    prompt: 'Once upon a time', max_tokens: 900, temperature: 0, ignore_eos: true, stream: true,
  });
  let chunks = 0;
  let error = null;
  try {
    for await (const c of stream) {
      if (++chunks === 1) {
        process.kill(victim, 'SIGSTOP');  // the request waits for rank 2 from here on ...
        setTimeout(() => process.kill(victim, 'SIGKILL'), 300);  // ... which then dies
      }
      assert.ok(c.choices.length > 0);
    }
  } catch (e) {
    error = e;
  }
  assert.ok(error, `the stream ended without an error after ${chunks} chunks`);
  assert.match(String(error.message), /--dist ep: the job is ending .* rank 2 /);
  assert.ok(chunks < 900);
  const code = await new Promise((resolve) => {
    if (server.proc.exitCode !== null) resolve(server.proc.exitCode);
    else server.proc.on('exit', (c, sig) => resolve(c ?? sig));
  });
  assert.notEqual(code, 0);
  assert.match(server.stderr(), /process rank 2 .*exited on signal 9/);
});
