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
    const timer = setTimeout(() => reject(new Error(`server did not start: ${err}`)), 30000);
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

export function stopServer(s) {
  return new Promise((resolve) => {
    if (s.proc.exitCode !== null) return resolve(s.proc.exitCode);
    s.proc.removeAllListeners('exit');
    s.proc.on('exit', (code) => resolve(code));
    s.proc.kill('SIGTERM');
  });
}

// Raw HTTP request; resolves {status, headers, body, json}.
export function raw(port, method, path, body, headers = {}) {
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
    });
    req.on('error', reject);
    if (body !== undefined) req.write(body);
    req.end();
  });
}

