// Bounded load test of `lowbit serve` on loopback with the OpenAI client:
// ROUNDS equal rounds of REQUESTS streaming chat completions, CONCURRENCY at
// a time; counts failures, checks every stream ended with a finish_reason
// and usage, and after each round (once the server has closed the round's
// connections) reads its heap in use (/health heap_in_use_bytes: glibc's
// allocated bytes) and VmRSS (/proc/PID/status). Prints one JSON line; exits
// 1 on any failed request, or when the heap grew by more than
// --max-heap-growth-kib or RSS by more than --max-growth-kib between the last
// two rounds (with --attack: between the end of the first round and the end
// of the last). The heap figure is the leak check: RSS also moves with
// glibc's arenas and thread-stack cache (thousands of connection threads per
// attack round moved it by up to 16 MiB either way), so its bound is loose.
//
//   LOWBIT=build/lowbit node tests/node/load.mjs [--parallel 4] [--requests 500]
//     [--concurrency 64] [--max-tokens 32] [--rounds 2] [--ctx 512]
//     [--threads 2] [--max-growth-kib 4096] [--max-heap-growth-kib 1024]
//     [--ignore-eos 1|0] [--model DIR]
// With --ignore-eos 1 (default) every reply has exactly max_tokens tokens
// (llama.cpp's ignore_eos extension), which is checked, so throughput
// figures compare equal work.
//
// --attack 1 adds, during every round, on loopback: an idle flood
// (--idle-flood N TCP connections that never send a byte, reopened when the
// server closes them) and a slowloris (--slowloris N connections sending a
// request line, then header bytes one every 200 ms, reopened when closed), plus
// /health probes every 100 ms on fresh connections from 127.0.0.2 (another
// client) and from 127.0.0.1 (the flood's own address). The server runs
// with --idle-timeout 3 --read-timeout 4; each round lasts at least
// --attack-min-s (6) seconds. Fails when a probe from the other client
// fails or takes more than --max-health-ms (default 2000), when more than
// 10% of the same-address probes fail (they compete with the flood for its
// address's cap: one whose request our loaded client sends late can be the
// oldest idle connection), or when the server's connection guard did not
// both evict (cap reached) and time out (deadline reached) connections
// (/health connections_evicted, connections_timed_out).
import { readFileSync } from 'node:fs';
import net from 'node:net';
import http from 'node:http';
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
const MAXHEAPGROW = +(args['max-heap-growth-kib'] || 1024);
const IGNORE_EOS = (args['ignore-eos'] || '1') !== '0'; // exact token counts
const ATTACK = (args.attack || '0') !== '0';
const IDLE_FLOOD = +(args['idle-flood'] || 260), SLOWLORIS = +(args.slowloris || 32);
const MAX_HEALTH_MS = +(args['max-health-ms'] || 2000);
const ATTACK_MIN_S = +(args['attack-min-s'] || 6);
const MODEL = args.model || `${process.env.LB_SHARED || '../shared'}/models/tinystories-656k`;

const rssKiB = (pid) => +readFileSync(`/proc/${pid}/status`, 'utf8').match(/VmRSS:\s+(\d+)/)[1];

const getJSON = (port, path) => new Promise((resolve, reject) => {
  const req = http.get({ host: '127.0.0.1', port, path, agent: false, timeout: 10000 }, (res) => {
    let d = '';
    res.on('data', (x) => { d += x; });
    res.on('end', () => { try { resolve(JSON.parse(d)); } catch (e) { reject(e); } });
    res.on('close', () => { if (!res.complete) reject(new Error(`${path}: response cut short`)); });
  });
  req.on('timeout', () => req.destroy(new Error('timeout')));
  req.on('error', reject);
});

// The server's heap in use in KiB once the round's connections are gone (up
// to 10 s: the connection threads of a flood close at the idle deadline);
// null where the server cannot tell (-1: not glibc).
async function heapKiB(port) {
  let h = null;
  for (let i = 0; i < 100; i++) {
    h = await getJSON(port, '/health');
    if (h.connections_open <= 1) break; // this probe's own connection
    await new Promise((r) => setTimeout(r, 100));
  }
  return h.heap_in_use_bytes >= 0 ? Math.round(h.heap_in_use_bytes / 1024) : null;
}

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

// ---- attack (loopback only, bounded: it stops when the round ends) ----
function attack(port) {
  let stop = false;
  const socks = new Set(), timers = new Set();
  let opened = 0;
  function idle() {
    if (stop) return;
    const s = net.connect(port, '127.0.0.1');
    opened++;
    socks.add(s);
    s.on('error', () => {});
    s.on('close', () => { socks.delete(s); if (!stop) setTimeout(idle, 250); });
  }
  // a slowloris sends its request line at once, then the headers slowly
  const slowLine = 'POST /v1/chat/completions HTTP/1.1\r\n';
  const slowText = 'Host: x\r\nX-Slow: ' + 'a'.repeat(4000);
  function slow() {
    if (stop) return;
    const s = net.connect(port, '127.0.0.1');
    opened++;
    socks.add(s);
    let i = 0;
    s.on('connect', () => s.write(slowLine));
    const t = setInterval(() => {
      if (s.destroyed || i >= slowText.length) return;
      s.write(slowText[i++]);
    }, 200);
    timers.add(t);
    s.on('error', () => {});
    s.on('close', () => {
      clearInterval(t); timers.delete(t); socks.delete(s);
      if (!stop) setTimeout(slow, 250);
    });
  }
  for (let i = 0; i < IDLE_FLOOD; i++) idle();
  for (let i = 0; i < SLOWLORIS; i++) slow();
  // /health on a fresh connection every 100 ms
  // /health probes on fresh connections, one every 100 ms from each of two
  // client addresses: 127.0.0.2 (another client: the flood's per-address
  // cap leaves it room) and 127.0.0.1 (the flood's own address: it competes
  // with the flood's connections for that address's cap)
  const probes = { other: { lat: [], failed: 0, errors: {} }, same: { lat: [], failed: 0, errors: {} } };
  let probing = true, last = null;
  const probe = (st, localAddress) => new Promise((resolve) => {
    const t0 = performance.now();
    let settled = false; // an error and a cut-short close count once
    const fail = (k) => {
      if (settled) return;
      settled = true;
      st.failed++;
      st.errors[k] = (st.errors[k] || 0) + 1;
      st.lat.push(performance.now() - t0);
      resolve();
    };
    const req = http.get({ host: '127.0.0.1', port, path: '/health', agent: false, timeout: 10000,
      localAddress }, (res) => {
      let d = '';
      res.on('data', (x) => { d += x; });
      res.on('end', () => {
        let j = null;
        try { j = JSON.parse(d); } catch { /* not JSON */ }
        if (res.statusCode !== 200 || !j) return fail(`status ${res.statusCode}`);
        if (settled) return;
        settled = true;
        last = j;
        st.lat.push(performance.now() - t0);
        resolve();
      });
      res.on('close', () => { if (!res.complete) fail('cut short'); });
    });
    req.on('timeout', () => req.destroy(new Error('timeout')));
    req.on('error', (e) => fail(String(e.code || e.message).slice(0, 60)));
  });
  const loops = [['other', '127.0.0.2'], ['same', '127.0.0.1']].map(([k, addr]) => (async () => {
    while (probing) {
      await probe(probes[k], addr);
      await new Promise((r) => setTimeout(r, 100));
    }
  })());
  const t0 = performance.now();
  return async () => {
    // long enough for the idle / read deadlines (3 s / 4 s) to act
    const left = ATTACK_MIN_S * 1000 - (performance.now() - t0);
    if (left > 0) await new Promise((r) => setTimeout(r, left));
    probing = false;
    await Promise.all(loops);
    stop = true;
    for (const t of timers) clearInterval(t);
    for (const s of socks) s.destroy();
    const stats = (st) => {
      const lat = st.lat.sort((a, b) => a - b);
      const q = (p) => +(lat[Math.min(lat.length - 1, Math.floor(p * lat.length))] || 0).toFixed(1);
      return { probes: lat.length, failed: st.failed, errors: st.errors, ms_p50: q(0.5), ms_p99: q(0.99),
        ms_max: +(lat[lat.length - 1] || 0).toFixed(1) };
    };
    return { attack_connections_opened: opened, health_other_client: stats(probes.other),
      health_same_address: stats(probes.same),
      guard: last && { open: last.connections_open, evicted: last.connections_evicted,
        timed_out: last.connections_timed_out, refused: last.connections_refused } };
  };
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
  '--queue', String(Math.max(64, C)), ...(ATTACK ? ['--idle-timeout', '3', '--read-timeout', '4'] : [])]);
const client = new OpenAI({ baseURL: `${srv.url}/v1`, apiKey: 'x', maxRetries: 0, timeout: 600000 });
const rounds = [];
const heap = [await heapKiB(srv.port)];
const rss = [rssKiB(srv.proc.pid)];
let attackBad = false;
for (let r = 0; r < ROUNDS; r++) {
  const stopAttack = ATTACK ? attack(srv.port) : null;
  const res = await round(client, r);
  if (stopAttack) {
    res.attack = await stopAttack();
    const a = res.attack;
    const o = a.health_other_client, m = a.health_same_address;
    if (o.failed > 0 || o.probes === 0 || o.ms_max > MAX_HEALTH_MS || m.probes === 0 ||
        m.failed > 0.1 * m.probes || !a.guard || a.guard.evicted === 0 || a.guard.timed_out === 0)
      attackBad = true;
  }
  rounds.push(res);
  heap.push(await heapKiB(srv.port));
  rss.push(rssKiB(srv.proc.pid));
}
const code = await stopServer(srv);
if (process.env.LB_LOAD_STDERR) console.error(srv.stderr().split('\n').slice(-20).join('\n'));
const failed = rounds.reduce((a, r) => a + r.failed, 0);
// without attack: growth over the last round; under attack: growth from the
// end of the first round to the end of the last (round 1 warms the caches),
// which a per-connection leak would make grow every round
const grow = (a) => (a.some((x) => x === null) ? null
  : ATTACK && a.length > 2 ? a[a.length - 1] - a[1] : a[a.length - 1] - a[a.length - 2]);
const growth = grow(rss), heapGrowth = grow(heap);
const out = { attack: ATTACK, parallel: P, threads: THREADS, requests_per_round: N, concurrency: C, max_tokens: MAXTOK,
  rounds, failed, heap_kib: heap, heap_growth_kib: heapGrowth, rss_kib: rss, rss_growth_kib: growth,
  server_exit: code };
console.log(JSON.stringify(out));
const ok = failed === 0 && growth <= MAXGROW && (heapGrowth === null || heapGrowth <= MAXHEAPGROW) &&
  code === 0 && !attackBad;
process.exit(ok ? 0 : 1);
