#!/usr/bin/env python3
"""Greedy generation with llama.cpp 0.7.0 through llama-server (reference chroot).

llama-completion prints its generated text through llama.cpp's asynchronous
logger, which loses its last entries at exit at random (exit status 0; under a
loaded 2-core CI machine most runs were cut, even after 5 retries: see
tests/lib_refenv.sh). llama-server answers over HTTP instead, so what it
generated either arrives whole in the JSON body or the request fails: nothing
is lost silently. Used by the interop tests that compare lowbit's greedy text
with llama.cpp's.

usage: llama_server_complete.py REFENV MODEL PROMPT N_PREDICT [--ignore-eos]
                                [-- SERVER_ARG...]
Prints the generated text (without the prompt) on stdout; exit 1 with the
reason (and the server log's tail) on stderr when no answer came.
"""
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def post(url, body, timeout):
    req = urllib.request.Request(url, data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return json.loads(r.read().decode("utf-8"))


def attempt(refenv, model, prompt, n, ignore_eos, extra, log):
    port = free_port()
    cmd = ["sh", refenv, "run", "llama-server", "-m", model, "--host", "127.0.0.1",
           "--port", str(port), "-t", "2", "-np", "1", "--no-webui", *extra]
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            if proc.poll() is not None:
                return None, f"llama-server exited with status {proc.returncode}"
            try:
                with urllib.request.urlopen(base + "/health", timeout=5) as r:
                    if r.status == 200:
                        break
            except (urllib.error.URLError, ConnectionError, OSError):
                pass
            if time.monotonic() > deadline:
                return None, "llama-server did not become healthy within 120 s"
            time.sleep(0.2)
        body = {"prompt": prompt, "n_predict": n, "temperature": 0, "top_k": 1,
                "cache_prompt": False, "ignore_eos": ignore_eos}
        j = post(base + "/completion", body, timeout=300)
        if "content" not in j:
            return None, f"no 'content' in the answer: {str(j)[:300]}"
        return j["content"], None
    except (urllib.error.URLError, ConnectionError, OSError, ValueError) as e:
        return None, f"request failed: {e}"
    finally:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def main():
    args = sys.argv[1:]
    extra = []
    if "--" in args:
        i = args.index("--")
        args, extra = args[:i], args[i + 1:]
    ignore_eos = "--ignore-eos" in args
    args = [a for a in args if a != "--ignore-eos"]
    if len(args) != 4:
        print(__doc__, file=sys.stderr)
        return 2
    refenv, model, prompt, n = args[0], args[1], args[2], int(args[3])
    # a port taken between free_port() and the bind is the one expected
    # failure: bounded retry, each reason printed
    why = ""
    for k in range(1, 4):
        with tempfile.TemporaryFile() as log:
            text, why = attempt(refenv, model, prompt, n, ignore_eos, extra, log)
            if text is not None:
                sys.stdout.write(text)
                return 0
            log.seek(0)
            tail = log.read().decode("utf-8", "replace")[-600:]
        print(f"note: llama-server: {why} (attempt {k} of 3)\n{tail}", file=sys.stderr)
    print(f"llama-server: {why}", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
