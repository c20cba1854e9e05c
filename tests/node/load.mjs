// Bounded load test of `lowbit serve` on loopback with the OpenAI client:
// ROUNDS equal rounds of REQUESTS streaming chat completions, CONCURRENCY at
// a time; counts failures, checks every stream ended with a finish_reason
// and usage, and reads the server's VmRSS (/proc/PID/status) after each
// round. Prints one JSON line; exits 1 on any failed request or when RSS
// grew by more than --max-growth-kib between the last two rounds.
//
//   LOWBIT=build/lowbit node tests/node/load.mjs [--parallel 4] [--requests 500]
//     [--concurrency 64] [--max-tokens 32] [--rounds 2] [--ctx 512]
//     [--threads 2] [--max-growth-kib 4096] [--ignore-eos 1|0] [--model DIR]
// With --ignore-eos 1 (default) every reply has exactly max_tokens tokens
// (llama.cpp's ignore_eos extension), which is checked, so throughput
// figures compare equal work.
import { readFileSync } from 'node:fs';
import OpenAI from 'openai';
import { startServer, stopServer } from './serve.lib.mjs';

const args = Object.fromEntries(process.argv.slice(2).reduce((acc, a, i, all) => {
  if (a.startsWith('--')) acc.push([a.slice(2), all[i + 1]]);
  return acc;
}, []));
const P = +(args.parallel || 4), N = +(args.requests || 500), C = +(args.concurrency || 64);
const MAXTOK = +(args['max-tokens'] || 32), ROUNDS = +(args.rounds || 2);
const CTX = +(args.ctx || 512), THREADS = +(args.threads || 2);
const MAXGROW = +(args['max-growth-kib'] || 4096);
const IGNORE_EOS = (args['ignore-eos'] || '1') !== '0'; // exact token counts
const MODEL = args.model || `${process.env.LB_SHARED || '../shared'}/models/tinystories-656k`;

const rssKiB = (pid) => +readFileSync(`/proc/${pid}/status`, 'utf8').match(/VmRSS:\s+(\d+)/)[1];

const subjects = ['a cat', 'a dog', 'the sea', 'a red ball', 'a big tree', 'the moon', 'a bird', 'a toy car'];

async function one(client, i) {
  const stream = await client.chat.completions.create({
    model: 'x', max_tokens: MAXTOK, temperature: 0.8, seed: i, stream: true,
    stream_options: { include_usage: true }, ignore_eos: IGNORE_EOS,
    messages: [{ role: 'user', content: `Tell me a story about ${subjects[i % subjects.length]}.` }],
  });
  let finish = null, usage = null;
  for await (const ch of stream) {
    if (ch.choices.length && ch.choices[0].finish_reason) finish = ch.choices[0].finish_reason;
    if (ch.usage) usage = ch.usage;
  }
  if (!finish || !usage) throw new Error(`stream ${i} ended without finish/usage`);
  if (IGNORE_EOS && (usage.completion_tokens !== MAXTOK || finish !== 'length'))
    throw new Error(`stream ${i}: ${usage.completion_tokens} tokens, ${finish}`);
  return usage.completion_tokens;
}

async function round(client, r) {
  let next = 0, failed = 0, tokens = 0;
  const errors = new Map();
  const t0 = performance.now();
  async function worker() {
    while (next < N) {
      const i = next++;
      try {
        const k = await one(client, r * N + i); // (not `tokens += await`: lost updates)
        tokens += k;
      } catch (e) {
        failed++;
        const k = String(e.status || e.code || e.message).slice(0, 80);
        errors.set(k, (errors.get(k) || 0) + 1);
      }
    }
  }
  await Promise.all(Array.from({ length: C }, worker));
  const s = (performance.now() - t0) / 1000;
  return { failed, tokens, seconds: +s.toFixed(3), tokens_per_s: +(tokens / s).toFixed(1),
    errors: Object.fromEntries(errors) };
}

const srv = await startServer(MODEL, ['-np', String(P), '-c', String(CTX), '-t', String(THREADS),
  '--queue', String(Math.max(64, C))]);
const client = new OpenAI({ baseURL: `${srv.url}/v1`, apiKey: 'x', maxRetries: 0, timeout: 600000 });
const rounds = [];
const rss = [rssKiB(srv.proc.pid)];
for (let r = 0; r < ROUNDS; r++) {
  rounds.push(await round(client, r));
  rss.push(rssKiB(srv.proc.pid));
}
const code = await stopServer(srv);
const failed = rounds.reduce((a, r) => a + r.failed, 0);
const growth = rss[rss.length - 1] - rss[rss.length - 2];
const out = { parallel: P, threads: THREADS, requests_per_round: N, concurrency: C, max_tokens: MAXTOK,
  rounds, failed, rss_kib: rss, rss_growth_last_round_kib: growth, server_exit: code };
console.log(JSON.stringify(out));
process.exit(failed === 0 && growth <= MAXGROW && code === 0 ? 0 : 1);
