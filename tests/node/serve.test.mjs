// Tests of `lowbit serve` with the official OpenAI client (openai npm
// package, package-lock.json) and raw HTTP for the error cases.
// Run by tests/cli_serve.sh:  LOWBIT=build/lowbit node --test tests/node/
import { test as nodeTest, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import http from 'node:http';
import net from 'node:net';
import OpenAI from 'openai';
import { startServer, stopServer, raw } from './serve.lib.mjs';

// Every test has its own time limit (2 min), so a hung one fails by name
// (node 20's --test-timeout bounds the whole file and names only the file).
function test(name, opts, fn) {
  if (typeof opts === 'function') { fn = opts; opts = {}; }
  return nodeTest(name, { timeout: 120000, ...opts }, fn);
}

const LOWBIT = process.env.LOWBIT;
const SHARED = process.env.LB_SHARED || '../shared';
const MODEL = `${SHARED}/models/tinystories-656k`;
const GGUF = `${SHARED}/models/stories260K/stories260K.gguf`;
if (!LOWBIT) throw new Error('set LOWBIT to the lowbit binary');

// ---- helpers ---------------------------------------------------------------

function lowbitJSON(args) {
  const p = spawnSync(LOWBIT, args, { encoding: 'utf8' });
  assert.equal(p.status, 0, `lowbit ${args.join(' ')}: ${p.stderr}`);
  return JSON.parse(p.stdout);
}

// lowbit's own token count for a text (add_special as the server uses it)
function nTokens(model, text, special) {
  const args = ['tokenize', model, text, '--json'];
  if (!special) args.push('--no-special');
  return lowbitJSON(args).ids.length;
}

const post = (port, path, obj, headers = {}) =>
  raw(port, 'POST', path, typeof obj === 'string' ? obj : JSON.stringify(obj),
      { 'Content-Type': 'application/json', ...headers });

// An OpenAI-shaped error with the given status, param and code.
function assertError(r, status, param, code) {
  assert.equal(r.status, status, `status ${r.status}: ${r.body}`);
  assert.ok(r.json && r.json.error, `no error object: ${r.body}`);
  const e = r.json.error;
  assert.deepEqual(Object.keys(e).sort(), ['code', 'message', 'param', 'type']);
  assert.equal(typeof e.message, 'string');
  assert.ok(e.message.length > 0);
  assert.equal(typeof e.type, 'string');
  assert.equal(e.param, param === undefined ? null : param, `param: ${r.body}`);
  assert.equal(e.code, code === undefined ? null : code, `code: ${r.body}`);
  assert.match(r.headers['content-type'], /application\/json/);
}

const chatml = (msgs) =>
  msgs.map((m) => `<|im_start|>${m.role}\n${m.content}<|im_end|>\n`).join('') +
  '<|im_start|>assistant\n';

// ---- servers -------------------------------------------------------------------

let A, B, client;
before(async () => {
  // A: the main server, 2 slots
  A = await startServer(MODEL, ['-np', '2', '-c', '256', '--name', 'ts656k', '-t', '1']);
  client = new OpenAI({ baseURL: `${A.url}/v1`, apiKey: 'unused', maxRetries: 0 });
  // B: API key, small body limit, 1 slot, no queue, long context
  B = await startServer(MODEL, ['-np', '1', '--queue', '0', '-c', '8192',
    '--api-key', 'sekret', '--max-body', '4096', '-t', '1']);
});
after(async () => {
  // both stopped before either is judged (a failing A must not leave B running)
  const [a, b] = await Promise.all([A ? stopServer(A) : 0, B ? stopServer(B) : 0]);
  assert.equal(a, 0, `server A exit status: ${A && A.stderr()}`);
  assert.equal(b, 0, `server B exit status: ${B && B.stderr()}`);
});

// ---- OpenAI client: completions --------------------------------------------------

const PROMPT = 'Once upon a time';

test('completion (greedy) equals lowbit run, usage equals lowbit tokenize', async () => {
  const r = await client.completions.create({
    model: 'ts656k', prompt: PROMPT, max_tokens: 32, temperature: 0,
  });
  const ref = lowbitJSON(['run', MODEL, '-p', PROMPT, '-n', '32', '--json', '-q']);
  assert.equal(r.object, 'text_completion');
  assert.match(r.id, /^cmpl-/);
  assert.equal(r.model, 'ts656k');
  assert.equal(typeof r.created, 'number');
  assert.equal(r.choices.length, 1);
  assert.equal(r.choices[0].index, 0);
  assert.equal(r.choices[0].logprobs, null);
  assert.equal(r.choices[0].text, ref.text);
  assert.equal(r.choices[0].finish_reason, ref.stop_reason === 'length' ? 'length' : 'stop');
  assert.equal(r.usage.prompt_tokens, nTokens(MODEL, PROMPT, true));
  assert.equal(r.usage.prompt_tokens, ref.n_prompt);
  assert.equal(r.usage.completion_tokens, ref.n_gen);
  assert.equal(r.usage.total_tokens, ref.n_prompt + ref.n_gen);
});

test('completion streaming: same text, finish chunk, usage chunk', async () => {
  const full = await client.completions.create({
    prompt: PROMPT, max_tokens: 40, temperature: 0, model: 'x' });
  const stream = await client.completions.create({
    prompt: PROMPT, max_tokens: 40, temperature: 0, model: 'x', stream: true,
    stream_options: { include_usage: true } });
  let text = '', finish = null, usage = null, n = 0, id = null;
  for await (const ch of stream) {
    n++;
    assert.equal(ch.object, 'text_completion');
    id = id || ch.id;
    assert.equal(ch.id, id);
    if (ch.choices.length === 0) { usage = ch.usage; continue; }
    assert.equal(usage, null, 'usage chunk must come last');
    assert.equal(ch.usage, null);
    text += ch.choices[0].text;
    if (ch.choices[0].finish_reason) finish = ch.choices[0].finish_reason;
  }
  assert.ok(n >= 3);
  assert.equal(text, full.choices[0].text);
  assert.equal(finish, full.choices[0].finish_reason);
  assert.deepEqual(usage, full.usage);
});

test('prompt forms: ["text"], token ids, [[ids]]', async () => {
  const a = await client.completions.create({ prompt: PROMPT, max_tokens: 8, temperature: 0, model: 'x' });
  const b = await client.completions.create({ prompt: [PROMPT], max_tokens: 8, temperature: 0, model: 'x' });
  assert.equal(b.choices[0].text, a.choices[0].text);
  const ids = lowbitJSON(['tokenize', MODEL, PROMPT, '--json']).ids;
  const c = await client.completions.create({ prompt: ids, max_tokens: 8, temperature: 0, model: 'x' });
  assert.equal(c.choices[0].text, a.choices[0].text);
  assert.equal(c.usage.prompt_tokens, ids.length);
  const d = await client.completions.create({ prompt: [ids], max_tokens: 8, temperature: 0, model: 'x' });
  assert.equal(d.choices[0].text, a.choices[0].text);
});

test('stop strings and seeded sampling', async () => {
  const full = await client.completions.create({ prompt: PROMPT, max_tokens: 32, temperature: 0, model: 'x' });
  const t = full.choices[0].text;
  const k = t.indexOf('Lily');
  assert.ok(k > 0, `test needs 'Lily' in ${JSON.stringify(t)}`);
  const s = await client.completions.create({ prompt: PROMPT, max_tokens: 32, temperature: 0, model: 'x', stop: ['zzz', 'Lily'] });
  assert.equal(s.choices[0].text, t.slice(0, k));
  assert.equal(s.choices[0].finish_reason, 'stop');
  const s2 = await client.completions.create({ prompt: PROMPT, max_tokens: 32, temperature: 0, model: 'x', stop: 'Lily' });
  assert.equal(s2.choices[0].text, t.slice(0, k));
  const opts = { prompt: PROMPT, max_tokens: 24, temperature: 0.9, top_k: 40, top_p: 0.95, min_p: 0.01,
    presence_penalty: 0.5, frequency_penalty: 0.3, seed: 1234, model: 'x' };
  const x = await client.completions.create(opts);
  const y = await client.completions.create(opts);
  assert.equal(x.choices[0].text, y.choices[0].text);
  // the same seed through lowbit run's sampler
  const ref = lowbitJSON(['run', MODEL, '-p', PROMPT, '-n', '24', '--temp', '0.9', '--top-k', '40',
    '--top-p', '0.95', '--min-p', '0.01', '--presence-penalty', '0.5', '--frequency-penalty', '0.3',
    '--seed', '1234', '--json', '-q']);
  assert.equal(x.choices[0].text, ref.text);
});

test('max_tokens is capped by the context (prompt + max_tokens <= n_ctx)', async () => {
  const r = await client.completions.create({ prompt: PROMPT, max_tokens: 100000, temperature: 0,
    model: 'x', ignore_eos: true });
  assert.equal(r.usage.prompt_tokens + r.usage.completion_tokens, 256);
  assert.equal(r.choices[0].finish_reason, 'length');
});

// ---- OpenAI client: chat ---------------------------------------------------------

const MSGS = [{ role: 'system', content: 'You tell stories.' },
  { role: 'user', content: 'Tell me about a cat.' }];

test('chat (ChatML fallback): greedy equals lowbit run --chat, usage equals tokenize', async () => {
  const r = await client.chat.completions.create({ model: 'x', messages: MSGS, max_tokens: 32, temperature: 0 });
  assert.equal(r.object, 'chat.completion');
  assert.match(r.id, /^chatcmpl-/);
  assert.equal(r.choices[0].message.role, 'assistant');
  assert.equal(r.choices[0].logprobs, null);
  const p = spawnSync(LOWBIT, ['run', MODEL, '--chat', '--system', MSGS[0].content, '-n', '32',
    '--json', '-q'], { input: `${MSGS[1].content}\n`, encoding: 'utf8' });
  assert.equal(p.status, 0, p.stderr);
  const ref = JSON.parse(p.stdout.trim().split('\n')[0]);
  assert.equal(r.choices[0].message.content, ref.reply);
  assert.equal(r.usage.prompt_tokens, nTokens(MODEL, chatml(MSGS), false));
  assert.equal(r.usage.prompt_tokens, ref.n_prompt);
  assert.equal(r.usage.completion_tokens, ref.n_gen);
  assert.equal(r.usage.total_tokens, r.usage.prompt_tokens + r.usage.completion_tokens);
  assert.equal(r.choices[0].finish_reason, ref.stop_reason === 'length' ? 'length' : 'stop');
});

test('chat streaming: role chunk, content deltas, finish, usage', async () => {
  const full = await client.chat.completions.create({ model: 'x', messages: MSGS, max_tokens: 48, temperature: 0 });
  const stream = await client.chat.completions.create({ model: 'x', messages: MSGS, max_tokens: 48,
    temperature: 0, stream: true, stream_options: { include_usage: true } });
  let text = '', first = true, finish = null, usage = null;
  for await (const ch of stream) {
    assert.equal(ch.object, 'chat.completion.chunk');
    if (ch.choices.length === 0) { usage = ch.usage; continue; }
    const d = ch.choices[0].delta;
    if (first) { assert.equal(d.role, 'assistant'); first = false; }
    else assert.equal(d.role, undefined);
    if (d.content) text += d.content;
    if (ch.choices[0].finish_reason) finish = ch.choices[0].finish_reason;
  }
  assert.equal(text, full.choices[0].message.content);
  assert.equal(finish, full.choices[0].finish_reason);
  assert.deepEqual(usage, full.usage);
  // without include_usage: no usage chunk
  const s2 = await client.chat.completions.create({ model: 'x', messages: MSGS, max_tokens: 4, stream: true });
  for await (const ch of s2) assert.ok(ch.choices.length === 1 && ch.usage === undefined);
});

test('chat content as a list of text parts equals the joined string', async () => {
  const parts = [{ role: 'user', content: [{ type: 'text', text: 'Tell me' }, { type: 'text', text: 'about a dog.' }] }];
  const joined = [{ role: 'user', content: 'Tell me\nabout a dog.' }];
  const a = await client.chat.completions.create({ model: 'x', messages: parts, max_tokens: 16, temperature: 0 });
  const b = await client.chat.completions.create({ model: 'x', messages: joined, max_tokens: 16, temperature: 0 });
  assert.equal(a.choices[0].message.content, b.choices[0].message.content);
  assert.equal(a.usage.prompt_tokens, b.usage.prompt_tokens);
  assert.equal(a.usage.prompt_tokens, nTokens(MODEL, chatml(joined), false));
});

test('models.list and health', async () => {
  const list = await client.models.list();
  const ids = [];
  for await (const m of list) ids.push(m.id);
  assert.deepEqual(ids, ['ts656k']);
  const h = await raw(A.port, 'GET', '/health');
  assert.equal(h.status, 200);
  assert.equal(h.json.status, 'ok');
  assert.equal(h.json.slots_total, 2);
});

test('concurrent requests (batched decode) equal sequential ones', async () => {
  const prompts = ['The dog', 'A big red ball', 'Tom and Sue went to the park', 'Once there was a bird',
    'The sun was', 'Mia had a toy', 'One day, a boy', 'The cat sat'];
  const seq = [];
  for (const p of prompts) {
    seq.push((await client.completions.create({ prompt: p, max_tokens: 24, temperature: 0, model: 'x' })).choices[0].text);
  }
  const par = await Promise.all(prompts.map((p, i) => (i % 2
    ? client.completions.create({ prompt: p, max_tokens: 24, temperature: 0, model: 'x' })
      .then((r) => r.choices[0].text)
    : client.completions.create({ prompt: p, max_tokens: 24, temperature: 0, model: 'x', stream: true })
      .then(async (s) => { let t = ''; for await (const c of s) t += c.choices[0]?.text || ''; return t; }))));
  assert.deepEqual(par, seq);
});

test('GGUF model (stories260K): completion equals lowbit run', { skip: !process.env.LB_TEST_GGUF && 'GGUF loading not in this build' }, async () => {
  const G = await startServer(GGUF, ['-c', '128']);
  try {
    const r = await post(G.port, '/v1/completions', { prompt: 'Once upon a time', max_tokens: 24, temperature: 0 });
    assert.equal(r.status, 200, r.body);
    const ref = lowbitJSON(['run', GGUF, '-p', 'Once upon a time', '-n', '24', '--json', '-q']);
    assert.equal(r.json.choices[0].text, ref.text);
    assert.equal(r.json.usage.prompt_tokens, nTokens(GGUF, 'Once upon a time', true));
  } finally {
    assert.equal(await stopServer(G), 0);
  }
});

// A GPTQ checkpoint directory is served from a GGUF cache beside it
// (lowbit-cache/model.gguf, exported on the first start, re-used after);
// tokenizer, template and EOS ids come from the directory, so completions
// and chats equal `lowbit run CKPT` (the checkpoint as it is), the GGUF's
// own `lowbit run`, and `lowbit serve --no-cache`.
test('GPTQ checkpoint: cached GGUF, greedy equals lowbit run CKPT and the cache', async () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'lbserve-'));
  const ck = path.join(dir, 'ts-gptq');
  const cacheFile = path.join(ck, 'lowbit-cache', 'model.gguf');
  try {
    const q = spawnSync(LOWBIT, ['quantize', MODEL, '-o', ck, '--method', 'rtn', '--group-size', '32', '-q'],
      { encoding: 'utf8' });
    assert.equal(q.status, 0, q.stderr);
    const PROMPT2 = 'Once upon a time';
    const complete = async (port) => {
      const r = await post(port, '/v1/completions', { prompt: PROMPT2, max_tokens: 32, temperature: 0 });
      assert.equal(r.status, 200, r.body);
      return r.json;
    };
    const chat = async (port) => {
      const r = await post(port, '/v1/chat/completions', { messages: MSGS, max_tokens: 24, temperature: 0 });
      assert.equal(r.status, 200, r.body);
      return r.json;
    };
    // first start: exported
    let S = await startServer(ck, ['-c', '256', '-t', '1'], { quiet: false });
    let first, firstChat;
    try {
      assert.match(S.stderr(), /info: exported GPTQ checkpoint .* to cache .*lowbit-cache\/model\.gguf \([0-9.]+ MB, [0-9.]+ s\)/);
      assert.ok(fs.statSync(cacheFile).size > 0);
      first = await complete(S.port);
      firstChat = await chat(S.port);
    } finally {
      assert.equal(await stopServer(S), 0);
    }
    const st0 = fs.statSync(cacheFile);
    const refCk = lowbitJSON(['run', ck, '-p', PROMPT2, '-n', '32', '--json', '-q']);
    const refGguf = lowbitJSON(['run', cacheFile, '-p', PROMPT2, '-n', '32', '--json', '-q']);
    assert.ok(refCk.text.length > 0);
    assert.equal(first.choices[0].text, refCk.text);
    assert.equal(first.choices[0].text, refGguf.text);
    assert.equal(first.usage.prompt_tokens, refCk.n_prompt);
    assert.equal(first.usage.prompt_tokens, nTokens(MODEL, PROMPT2, true)); // the dense dir's tokenizer
    // chat: same template, BOS handling and stops as the checkpoint itself
    const p = spawnSync(LOWBIT, ['run', ck, '--chat', '--system', MSGS[0].content, '-n', '24',
      '--json', '-q'], { input: `${MSGS[1].content}\n`, encoding: 'utf8' });
    assert.equal(p.status, 0, p.stderr);
    const refChat = JSON.parse(p.stdout.trim().split('\n')[0]);
    assert.equal(firstChat.choices[0].message.content, refChat.reply);
    assert.equal(firstChat.usage.prompt_tokens, refChat.n_prompt);
    assert.equal(firstChat.usage.prompt_tokens, nTokens(MODEL, chatml(MSGS), false));
    // second start: the cache is re-used, not rewritten
    S = await startServer(ck, ['-c', '256', '-t', '1'], { quiet: false });
    try {
      assert.match(S.stderr(), /info: using cached GGUF .*lowbit-cache\/model\.gguf/);
      assert.doesNotMatch(S.stderr(), /exported GPTQ/);
      const again = await complete(S.port);
      assert.equal(again.choices[0].text, first.choices[0].text);
    } finally {
      assert.equal(await stopServer(S), 0);
    }
    const st1 = fs.statSync(cacheFile);
    assert.equal(st1.ino, st0.ino);
    assert.equal(st1.mtimeMs, st0.mtimeMs);
    // --no-cache: the checkpoint as it is, same outputs
    S = await startServer(ck, ['-c', '256', '-t', '1', '--no-cache'], { quiet: false });
    try {
      assert.doesNotMatch(S.stderr(), /cached GGUF|exported GPTQ/);
      assert.equal((await complete(S.port)).choices[0].text, first.choices[0].text);
      assert.equal((await chat(S.port)).choices[0].message.content, firstChat.choices[0].message.content);
    } finally {
      assert.equal(await stopServer(S), 0);
    }
    // a changed checkpoint rebuilds the cache
    const cfgPath = path.join(ck, 'config.json');
    const cfg = JSON.parse(fs.readFileSync(cfgPath, 'utf8'));
    cfg.max_position_embeddings = 384;
    fs.writeFileSync(cfgPath, JSON.stringify(cfg, null, 2));
    S = await startServer(ck, ['-t', '1'], { quiet: false });
    try {
      assert.match(S.stderr(), /building the GGUF cache .* \(config\.json changed\)/);
      assert.match(S.stderr(), /exported GPTQ checkpoint/);
      assert.equal((await complete(S.port)).choices[0].text, first.choices[0].text);
    } finally {
      assert.equal(await stopServer(S), 0);
    }
    assert.notEqual(fs.statSync(cacheFile).ino, st0.ino);
    assert.deepEqual(fs.readdirSync(path.join(ck, 'lowbit-cache')), ['model.gguf']);
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
});

// ---- raw HTTP: every error case ----------------------------------------------------

test('400: malformed JSON, non-object body, empty body, trailing data', async () => {
  assertError(await post(A.port, '/v1/completions', '{"prompt": "x",'), 400);
  assertError(await post(A.port, '/v1/completions', '[1, 2]'), 400);
  assertError(await post(A.port, '/v1/completions', ''), 400);
  assertError(await post(A.port, '/v1/completions', '{"prompt":"x"} {}'), 400);
  assertError(await post(A.port, '/v1/chat/completions', 'nonsense'), 400);
  assertError(await post(A.port, '/v1/completions', '{"prompt":"a\u0000"}'.replace('\\u0000', '\u0000')), 400);
});

test('400: missing and mistyped fields name the param', async () => {
  const C = '/v1/completions', H = '/v1/chat/completions';
  const cases = [
    [C, {}, 'prompt'],
    [C, { prompt: 5 }, 'prompt'],
    [C, { prompt: [] }, 'prompt'],
    [C, { prompt: ['a', 'b'] }, 'prompt'],
    [C, { prompt: [1, 'a'] }, 'prompt'],
    [C, { prompt: [1, -3] }, 'prompt'],
    [C, { prompt: [1, 999999] }, 'prompt'],
    [C, { prompt: 'x', model: 3 }, 'model'],
    [C, { prompt: 'x', max_tokens: 'ten' }, 'max_tokens'],
    [C, { prompt: 'x', max_tokens: 1.5 }, 'max_tokens'],
    [C, { prompt: 'x', max_tokens: -1 }, 'max_tokens'],
    [H, { messages: MSGS, max_completion_tokens: -1 }, 'max_completion_tokens'],
    [C, { prompt: 'x', temperature: 'hot' }, 'temperature'],
    [C, { prompt: 'x', temperature: 3 }, 'temperature'],
    [C, { prompt: 'x', top_p: 1.5 }, 'top_p'],
    [C, { prompt: 'x', top_k: -1 }, 'top_k'],
    [C, { prompt: 'x', min_p: [] }, 'min_p'],
    [C, { prompt: 'x', presence_penalty: 5 }, 'presence_penalty'],
    [C, { prompt: 'x', frequency_penalty: '1' }, 'frequency_penalty'],
    [C, { prompt: 'x', seed: 1.25 }, 'seed'],
    [C, { prompt: 'x', stop: 5 }, 'stop'],
    [C, { prompt: 'x', stop: ['a', 5] }, 'stop'],
    [C, { prompt: 'x', stop: Array(17).fill('a') }, 'stop'],
    [C, { prompt: 'x', n: 2 }, 'n'],
    [C, { prompt: 'x', n: 'one' }, 'n'],
    [C, { prompt: 'x', stream: 'yes' }, 'stream'],
    [C, { prompt: 'x', stream: true, stream_options: 1 }, 'stream_options'],
    [C, { prompt: 'x', stream: true, stream_options: { include_usage: 'y' } }, 'stream_options.include_usage'],
    [C, { prompt: 'x', logprobs: 21 }, 'logprobs'],
    [C, { prompt: 'x', echo: 'yes' }, 'echo'],
    [C, { prompt: 'x', best_of: 3 }, 'best_of'],
    [H, {}, 'messages'],
    [H, { messages: 'hi' }, 'messages'],
    [H, { messages: [] }, 'messages'],
    [H, { messages: ['hi'] }, 'messages[0]'],
    [H, { messages: [{ role: 5, content: 'x' }] }, 'messages[0].role'],
    [H, { messages: [{ role: 'wizard', content: 'x' }] }, 'messages[0].role'],
    [H, { messages: [{ role: 'user' }] }, 'messages[0].content'],
    [H, { messages: [{ role: 'user', content: 7 }] }, 'messages[0].content'],
    [H, { messages: [{ role: 'user', content: [{ type: 'image_url', image_url: { url: 'x' } }] }] }, 'messages[0].content[0]'],
    [H, { messages: [{ role: 'user', content: 'a' }, { role: 'user', content: [{ type: 'text', text: 3 }] }] }, 'messages[1].content[0]'],
  ];
  for (const [path, body, param] of cases) {
    const r = await post(A.port, path, body);
    assertError(r, 400, param);
    assert.equal(r.json.error.type, 'invalid_request_error', JSON.stringify(body));
  }
  // unknown fields and nulls are ignored
  const ok = await post(A.port, C, { prompt: 'x', max_tokens: 2, frobnicate: { a: 1 }, temperature: null, user: 'u' });
  assert.equal(ok.status, 200, ok.body);
});

test('400 context_length_exceeded', async () => {
  const long = 'the cat sat on the mat. '.repeat(60); // > 256 tokens
  assert.ok(nTokens(MODEL, long, true) > 256);
  assertError(await post(A.port, '/v1/completions', { prompt: long }), 400, 'prompt', 'context_length_exceeded');
  assertError(await post(A.port, '/v1/chat/completions', { messages: [{ role: 'user', content: long }] }),
    400, 'messages', 'context_length_exceeded');
});

test('404 unknown route, 405 wrong method', async () => {
  const r = await raw(A.port, 'GET', '/v1/nothing');
  assertError(r, 404, undefined, 'unknown_url');
  assertError(await post(A.port, '/v2/completions', { prompt: 'x' }), 404, undefined, 'unknown_url');
  const m = await raw(A.port, 'GET', '/v1/completions');
  assertError(m, 405, undefined, 'method_not_allowed');
  assert.equal(m.headers.allow, 'POST');
  const m2 = await raw(A.port, 'DELETE', '/v1/chat/completions');
  assertError(m2, 405, undefined, 'method_not_allowed');
  const m3 = await post(A.port, '/v1/models', {});
  assertError(m3, 405, undefined, 'method_not_allowed');
  assert.equal(m3.headers.allow, 'GET');
});

const AUTH = { Authorization: 'Bearer sekret' };

test('401 invalid_api_key (B has --api-key); /health needs none', async () => {
  assertError(await post(B.port, '/v1/completions', { prompt: 'x' }), 401, undefined, 'invalid_api_key');
  assertError(await post(B.port, '/v1/completions', { prompt: 'x' }, { Authorization: 'Bearer nope' }),
    401, undefined, 'invalid_api_key');
  assertError(await post(B.port, '/v1/completions', { prompt: 'x' }, { Authorization: 'Bearer sekret2' }),
    401, undefined, 'invalid_api_key');
  assertError(await raw(B.port, 'GET', '/v1/models'), 401, undefined, 'invalid_api_key');
  assert.equal((await raw(B.port, 'GET', '/health')).status, 200);
  const ok = await post(B.port, '/v1/completions', { prompt: 'x', max_tokens: 2 }, AUTH);
  assert.equal(ok.status, 200, ok.body);
  // the OpenAI client with the right and a wrong key
  const good = new OpenAI({ baseURL: `${B.url}/v1`, apiKey: 'sekret', maxRetries: 0 });
  assert.equal((await good.completions.create({ model: 'x', prompt: 'x', max_tokens: 2 })).choices.length, 1);
  const bad = new OpenAI({ baseURL: `${B.url}/v1`, apiKey: 'wrong', maxRetries: 0 });
  await assert.rejects(bad.completions.create({ model: 'x', prompt: 'x', max_tokens: 2 }),
    (e) => e.status === 401 && e.code === 'invalid_api_key');
});

test('413 body over --max-body (Content-Length and chunked)', async () => {
  const big = JSON.stringify({ prompt: 'x'.repeat(5000) });
  assertError(await post(B.port, '/v1/completions', big, AUTH), 413, undefined, 'request_too_large');
  // chunked: no Content-Length, the limit is hit while reading
  const r = await new Promise((resolve, reject) => {
    const req = http.request({ host: '127.0.0.1', port: B.port, method: 'POST', path: '/v1/completions',
      headers: { ...AUTH, 'Transfer-Encoding': 'chunked' } }, (res) => {
      let d = '';
      res.on('data', (x) => { d += x; });
      res.on('end', () => resolve({ status: res.statusCode, headers: res.headers, body: d, json: JSON.parse(d) }));
    });
    req.on('error', reject);
    for (let i = 0; i < 10; i++) req.write('{"prompt":"' + 'y'.repeat(1000));
    req.end('"}');
  });
  assertError(r, 413, undefined, 'request_too_large');
  // a body just under the limit is fine
  const ok = await post(B.port, '/v1/completions', { prompt: 'Once upon a time '.repeat(200), max_tokens: 1 }, AUTH);
  assert.notEqual(ok.status, 413);
});

// Open a streaming request on B that holds its only slot; resolves once the
// first event arrived: {sock, got}. Rejects on any other answer (a complete
// non-SSE response, a closed socket) instead of waiting for ever.
function holdSlot() {
  return new Promise((resolve, reject) => {
    const body = JSON.stringify({ prompt: 'Once', max_tokens: 8000, stream: true, ignore_eos: true });
    const sock = net.connect(B.port, '127.0.0.1', () => {
      sock.write(`POST /v1/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer sekret\r\n` +
        `Content-Type: application/json\r\nContent-Length: ${Buffer.byteLength(body)}\r\n\r\n${body}`);
    });
    let got = '';
    const fail = (why) => { sock.destroy(); reject(new Error(`holdSlot: ${why}: ${JSON.stringify(got.slice(0, 400))}`)); };
    sock.on('data', (d) => {
      got += d;
      if (got.includes('data: {')) { sock.removeAllListeners(); sock.on('error', () => {}); resolve({ sock, got }); }
      else if (/^HTTP\/1\.1 (?!200)\d{3}/.test(got) && got.includes('\r\n\r\n{')) fail('not a stream');
    });
    sock.on('close', () => fail('closed before the first event'));
    sock.on('error', (e) => fail(e.message));
  });
}

// The first CPU this process may run on (for taskset).
function firstCpu() {
  const m = fs.readFileSync('/proc/self/status', 'utf8').match(/^Cpus_allowed_list:\s*(\d+)/m);
  return m ? m[1] : '0';
}

test('sequential requests on one slot with no queue never get 503 (slot freed before the answer)', async () => {
  // On one CPU the client's next request used to arrive while the scheduler
  // still counted the slot as busy (8% of requests got 503 server_busy).
  const S = await startServer(MODEL, ['-np', '1', '--queue', '0', '-c', '256', '-t', '1'],
    { wrap: ['taskset', '-c', firstCpu()] });
  try {
    const codes = {};
    for (let i = 0; i < 150; i++) {
      const r = await post(S.port, '/v1/completions', { prompt: 'x', max_tokens: 1 });
      codes[r.status] = (codes[r.status] || 0) + 1;
    }
    assert.deepEqual(codes, { 200: 150 });
  } finally {
    assert.equal(await stopServer(S), 0);
  }
});

async function waitFor(pred, ms = 10000) {
  const end = Date.now() + ms;
  while (Date.now() < end) {
    if (await pred()) return true;
    await new Promise((r) => setTimeout(r, 50));
  }
  return false;
}

test('503 when the slot and queue are full; disconnect cancels and frees the slot', async () => {
  const before = (await raw(B.port, 'GET', '/health')).json;
  const { sock, got } = await holdSlot();
  assert.match(got, /HTTP\/1\.1 200/);
  assert.match(got, /text\/event-stream/);
  const h = (await raw(B.port, 'GET', '/health')).json;
  assert.equal(h.slots_processing, 1);
  const r = await post(B.port, '/v1/completions', { prompt: 'x', max_tokens: 2 }, AUTH);
  assertError(r, 503, undefined, 'server_busy');
  assert.equal(r.headers['retry-after'], '1');
  assert.equal(r.json.error.type, 'server_error');
  // the client goes away: its generation is cancelled and the slot freed
  sock.destroy();
  assert.ok(await waitFor(async () => {
    const x = (await raw(B.port, 'GET', '/health')).json;
    return x.slots_processing === 0 && x.generations_cancelled === before.generations_cancelled + 1;
  }), 'the disconnected stream was not cancelled');
  const after = (await raw(B.port, 'GET', '/health')).json;
  assert.ok(after.tokens_generated - before.tokens_generated < 8000, 'generation ran to the end');
  const ok = await post(B.port, '/v1/completions', { prompt: 'x', max_tokens: 2 }, AUTH);
  assert.equal(ok.status, 200, ok.body);
});

test('non-streaming request cancelled by disconnect', async () => {
  const before = (await raw(B.port, 'GET', '/health')).json;
  const body = JSON.stringify({ prompt: 'Once', max_tokens: 8000, ignore_eos: true });
  const sock = net.connect(B.port, '127.0.0.1', () => {
    sock.write(`POST /v1/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer sekret\r\n` +
      `Content-Length: ${Buffer.byteLength(body)}\r\n\r\n${body}`);
  });
  sock.on('error', () => {});
  assert.ok(await waitFor(async () => (await raw(B.port, 'GET', '/health')).json.slots_processing === 1));
  sock.destroy();
  assert.ok(await waitFor(async () => {
    const x = (await raw(B.port, 'GET', '/health')).json;
    return x.slots_processing === 0 && x.generations_cancelled === before.generations_cancelled + 1;
  }), 'the disconnected request was not cancelled');
});

test('SSE framing on the wire', async () => {
  const r = await post(A.port, '/v1/chat/completions',
    { messages: MSGS, max_tokens: 4, stream: true, stream_options: { include_usage: true } });
  assert.equal(r.status, 200);
  assert.match(r.headers['content-type'], /^text\/event-stream/);
  assert.ok(r.body.endsWith('data: [DONE]\n\n'));
  const events = r.body.split('\n\n').filter((e) => e);
  for (const e of events) assert.ok(e.startsWith('data: '), e);
  const objs = events.slice(0, -1).map((e) => JSON.parse(e.slice(6)));
  assert.deepEqual(objs[0].choices[0].delta, { role: 'assistant', content: '' });
  const last = objs[objs.length - 1];
  assert.deepEqual(last.choices, []);
  assert.equal(last.usage.completion_tokens, 4);
  assert.ok(objs[objs.length - 2].choices[0].finish_reason === 'length');
});

// ---- HTTP framing and the connection guard (issue 11) --------------------------

// Send raw bytes on a new socket; resolves everything the server sent until
// it closed the connection (or timeoutMs passed).
function rawExchange(port, bytes, timeoutMs = 5000) {
  return new Promise((resolve) => {
    const s = net.connect(port, '127.0.0.1');
    let data = Buffer.alloc(0);
    const t = setTimeout(() => s.destroy(), timeoutMs);
    s.on('connect', () => s.write(bytes));
    s.on('data', (d) => { data = Buffer.concat([data, d]); });
    s.on('error', () => {});
    s.on('close', () => { clearTimeout(t); resolve(data.toString('latin1')); });
  });
}

// Exactly one well-formed HTTP response with a JSON error body.
function assertOneJsonError(text, status, code) {
  const starts = text.match(/HTTP\/1\.[01] \d{3}/g) || [];
  assert.equal(starts.length, 1, `one status line expected: ${JSON.stringify(text.slice(0, 400))}`);
  const [head, ...rest] = text.split('\r\n\r\n');
  const body = rest.join('\r\n\r\n');
  assert.match(head, new RegExp(`^HTTP/1\\.1 ${status} `));
  assert.match(head, /\r\nContent-Type: application\/json\r\n/i);
  const len = +head.match(/\r\nContent-Length: (\d+)/i)[1];
  assert.equal(Buffer.byteLength(body, 'latin1'), len, 'body length = Content-Length');
  const e = JSON.parse(body).error;
  assert.equal(e.code, code);
  assert.equal(typeof e.message, 'string');
}

test('malformed framing: one JSON 400/413 response, never MHD HTML', async () => {
  const body = '{"prompt":"x","max_tokens":1}';
  for (const [cl, status, code] of [['-5', 400, 'malformed_request'], ['abc', 400, 'malformed_request'],
    ['5, 6', 400, 'malformed_request'], ['99999999999999999999999', 413, 'request_too_large']]) {
    const text = await rawExchange(A.port, 'POST /v1/completions HTTP/1.1\r\nHost: x\r\n' +
      `Content-Length: ${cl}\r\nContent-Type: application/json\r\n\r\n${body}`);
    assertOneJsonError(text, status, code);
  }
  // a bad chunk size in a chunked body
  const text = await rawExchange(A.port, 'POST /v1/completions HTTP/1.1\r\nHost: x\r\n' +
    'Transfer-Encoding: chunked\r\nContent-Type: application/json\r\n\r\nzz\r\n{}\r\n0\r\n\r\n');
  assert.ok(!/<html>/i.test(text), text);
  // the server still answers
  assert.equal((await raw(A.port, 'GET', '/health')).status, 200);
});

test('header too large: 431 request_header_too_large as JSON', async () => {
  const text = await rawExchange(A.port, 'GET /health HTTP/1.1\r\nHost: x\r\nX-Big: ' +
    'a'.repeat(40000) + '\r\n\r\n');
  assertOneJsonError(text, 431, 'request_header_too_large');
  const h = await raw(A.port, 'GET', '/health');
  assert.ok(h.json.http_errors >= 1, h.body);
});

// Open n idle sockets one after the other; resolves them with a closed flag.
async function openIdle(port, n) {
  const socks = [];
  for (let i = 0; i < n; i++) {
    await new Promise((resolve) => {
      const s = net.connect(port, '127.0.0.1', resolve);
      s.closedAt = null;
      s.on('error', () => {});
      s.on('close', () => { s.closedAt = performance.now(); });
      socks.push(s);
    });
    await new Promise((r) => setTimeout(r, 5)); // accept order = open order
  }
  return socks;
}

test('connection guard: caps evict the oldest idle, deadlines close idle and slowloris', async () => {
  const C = await startServer(MODEL, ['-np', '1', '-c', '256', '-t', '1', '--max-conn', '8',
    '--max-conn-per-ip', '6', '--idle-timeout', '4', '--read-timeout', '5']);
  try {
    // 10 idle connections from one address, cap 6: the 4 oldest are closed
    const idle = await openIdle(C.port, 10);
    await waitFor(async () => idle.slice(0, 4).every((s) => s.closedAt !== null), 3000);
    assert.deepEqual(idle.map((s) => s.closedAt !== null),
      [true, true, true, true, false, false, false, false, false, false]);
    // /health is served at once (it closes the oldest idle one again)
    const t0 = performance.now();
    const h = await raw(C.port, 'GET', '/health');
    assert.equal(h.status, 200);
    assert.ok(performance.now() - t0 < 3000);
    assert.ok(h.json.connections_evicted >= 5, h.body);
    // a request in flight is never the one closed: a streaming chat held
    // open while 10 more idle connections arrive
    const c = new OpenAI({ baseURL: `${C.url}/v1`, apiKey: 'x', maxRetries: 0 });
    const stream = await c.chat.completions.create({ model: 'x', stream: true, max_tokens: 200,
      ignore_eos: true, messages: [{ role: 'user', content: 'Hi' }] });
    const more = await openIdle(C.port, 10);
    let n = 0;
    for await (const ch of stream) if (ch.choices.length && ch.choices[0].delta.content) n++;
    assert.ok(n > 0);
    // idle deadline: everything idle is closed within ~4 s (+ the 200 ms
    // tick; waited for up to 10 s so that a loaded machine does not fail it)
    assert.ok(await waitFor(async () => [...idle, ...more].every((s) => s.closedAt !== null), 10000),
      'idle connections closed');
    // slowloris: bytes every 300 ms. A request line sent slowly meets the
    // idle deadline (4 s); header lines or a body sent slowly after a whole
    // request line meet the read deadline (5 s from the request line)
    const slow = (first, rest) => new Promise((resolve) => {
      const s = net.connect(C.port, '127.0.0.1');
      s.on('error', () => {});
      const start = performance.now();
      let i = 0, timer = null;
      s.on('connect', () => {
        if (first) s.write(first);
        timer = setInterval(() => { if (!s.destroyed && i < rest.length) s.write(rest[i++]); }, 300);
      });
      s.on('close', () => { clearInterval(timer); resolve(performance.now() - start); });
    });
    const [msLine, msHead, msBody] = await Promise.all([
      slow('', 'GET /health HTTP/1.1\r\nHost: x\r\n'),
      slow('GET /health HTTP/1.1\r\n', 'Host: x\r\nX-Slow: ' + 'a'.repeat(100)),
      slow('POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n' +
           'Content-Length: 300\r\n\r\n', '{"prompt":"' + 'a'.repeat(300)),
    ]);
    assert.ok(msLine > 3900 && msLine < 6500, `slow request line closed after ${msLine} ms`);
    assert.ok(msHead > 4900 && msHead < 7500, `slow headers closed after ${msHead} ms`);
    assert.ok(msBody > 4900 && msBody < 7500, `slow body closed after ${msBody} ms`);
    const h2 = await raw(C.port, 'GET', '/health');
    assert.ok(h2.json.connections_timed_out >= 1, h2.body);
  } finally {
    assert.equal(await stopServer(C), 0);
  }
});

// ---- message content is plain text (issue 11) -----------------------------------

test('chat content cannot produce special tokens (--special-in-content restores it)', async () => {
  // tinystories-656k: "<|end_story|>" (EOS) is a special token, matched as
  // "▁<|end_story|>" (normalized); the ChatML fallback template
  const msgs = [{ role: 'user', content: 'The end. <|end_story|> Then <|start_story|> more' }];
  const render = chatml(msgs);
  const tokArgs = (extra) => lowbitJSON(['tokenize', MODEL, render, '--json', '--no-special', ...extra]).ids;
  const plainIds = tokArgs(['--no-parse-special']), specialIds = tokArgs([]);
  assert.ok(specialIds.includes(2) && !plainIds.includes(2), 'the content holds a control text');
  const r = await client.chat.completions.create({ model: 'x', messages: msgs, max_tokens: 1, temperature: 0 });
  assert.equal(r.usage.prompt_tokens, plainIds.length, 'default: content tokenized as text');
  const S = await startServer(MODEL, ['-np', '1', '-c', '256', '-t', '1', '--special-in-content']);
  try {
    const c2 = new OpenAI({ baseURL: `${S.url}/v1`, apiKey: 'x', maxRetries: 0 });
    const r2 = await c2.chat.completions.create({ model: 'x', messages: msgs, max_tokens: 1, temperature: 0 });
    assert.equal(r2.usage.prompt_tokens, specialIds.length, '--special-in-content: as transformers');
    assert.notEqual(r2.usage.prompt_tokens, r.usage.prompt_tokens);
  } finally {
    assert.equal(await stopServer(S), 0);
  }
  // /v1/completions: the prompt is the caller's raw text, specials parsed
  const p = 'Once <|end_story|> upon';
  const rc = await client.completions.create({ model: 'x', prompt: p, max_tokens: 1, temperature: 0 });
  assert.equal(rc.usage.prompt_tokens, nTokens(MODEL, p, true));
});

test('400 for fields lowbit cannot honour; \\u0000 never truncates a prompt', async () => {
  const M = [{ role: 'user', content: 'Hi' }];
  for (const [path, extra, param] of [
    ['/v1/chat/completions', { logit_bias: { 5: 10 } }, 'logit_bias'],
    ['/v1/chat/completions', { tools: [{ type: 'function', function: { name: 'f' } }] }, 'tools'],
    ['/v1/chat/completions', { response_format: { type: 'json_object' } }, 'response_format'],
    ['/v1/chat/completions', { logprobs: 0 }, 'logprobs'],
    ['/v1/completions', { logit_bias: { 5: -100 } }, 'logit_bias'],
    ['/v1/completions', { logprobs: 21 }, 'logprobs'],
  ]) {
    const body = path.includes('chat') ? { messages: M, max_tokens: 1, ...extra }
      : { prompt: 'Hi', max_tokens: 1, ...extra };
    assertError(await post(A.port, path, body), 400, param);
  }
  // the no-op values clients send by default are accepted
  const ok = await post(A.port, '/v1/chat/completions', { messages: M, max_tokens: 1, tools: [],
    tool_choice: 'none', response_format: { type: 'text' }, logit_bias: {}, user: 'u' });
  assert.equal(ok.status, 200, ok.body);
  // \u0000: refused, never cut at the NUL
  assertError(await post(A.port, '/v1/completions', '{"prompt":"Once\\u0000 upon","max_tokens":1}'), 400);
  assertError(await post(A.port, '/v1/chat/completions',
    '{"messages":[{"role":"user","content":"a\\u0000b"}],"max_tokens":1}'), 400);
});
