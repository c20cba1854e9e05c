// Helpers shared by serve.test.mjs and load.mjs.
import { spawn } from 'node:child_process';
import http from 'node:http';

const LOWBIT = process.env.LOWBIT;

// Start `lowbit serve MODEL --port 0 ARGS` (with -q unless quiet is false);
// resolves {proc, port, url, stderr()}.
// wrap: a command line the server runs under (e.g. ['taskset', '-c', '0']).
export function startServer(model, args = [], { quiet = true, wrap = [] } = {}) {
  return new Promise((resolve, reject) => {
    const argv = [...wrap, LOWBIT, 'serve', model, '--port', '0', ...(quiet ? ['-q'] : []), ...args];
    const proc = spawn(argv[0], argv.slice(1), {
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let out = '', err = '';
    const timer = setTimeout(() => {
      proc.kill('SIGKILL'); // not left running behind a failed test
      reject(new Error(`server did not start: ${err}`));
    }, 30000);
    proc.stdout.on('data', (d) => {
      out += d;
      const m = out.match(/listening on http:\/\/127\.0\.0\.1:(\d+)/);
      if (m) {
        clearTimeout(timer);
        resolve({ proc, port: +m[1], url: `http://127.0.0.1:${m[1]}`, stderr: () => err });
      }
    });
    proc.stderr.on('data', (d) => { err += d; });
    proc.on('exit', (code) => {
      clearTimeout(timer);
      reject(new Error(`server exited with ${code}: ${err}`));
    });
  });
}

// SIGTERM, then SIGKILL after 15 s; resolves the exit status, or the signal's
// name when a signal ended the server (e.g. SIGABRT from a sanitizer: its
// report is in s.stderr()).
export function stopServer(s) {
  return new Promise((resolve) => {
    const done = () => s.proc.exitCode ?? s.proc.signalCode;
    if (done() !== null) return resolve(done());
    s.proc.removeAllListeners('exit');
    const kill = setTimeout(() => s.proc.kill('SIGKILL'), 15000);
    s.proc.on('exit', (code, signal) => { clearTimeout(kill); resolve(code ?? signal); });
    s.proc.kill('SIGTERM');
  });
}

// Raw HTTP request; resolves {status, headers, body, json}; rejects when the
// response is cut short or nothing moves for timeoutMs.
export function raw(port, method, path, body, headers = {}, timeoutMs = 60000) {
  return new Promise((resolve, reject) => {
    const req = http.request({ host: '127.0.0.1', port, method, path, headers }, (res) => {
      let data = '';
      res.setEncoding('utf8');
      res.on('data', (d) => { data += d; });
      res.on('end', () => {
        let json = null;
        try { json = JSON.parse(data); } catch { /* not JSON */ }
        resolve({ status: res.statusCode, headers: res.headers, body: data, json });
      });
      res.on('close', () => { if (!res.complete) reject(new Error(`${method} ${path}: response cut short`)); });
    });
    req.setTimeout(timeoutMs, () => req.destroy(new Error(`${method} ${path}: no answer in ${timeoutMs} ms`)));
    req.on('error', reject);
    if (body !== undefined) req.write(body);
    req.end();
  });
}

