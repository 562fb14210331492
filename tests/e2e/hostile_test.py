#!/usr/bin/env python3
"""The standing hostile-input suite: what a hostile but realistic user did to kvgate, kept as
probes against the real binaries (`kvgate serve` and `kvgate run` on the built-in model, CPU,
loopback only), so each defect stays found. Every probe is bounded in time and requests.

Findings of 2026-12-02 (issue 32), each a probe that failed before its fix:
  shared-out      two `kvgate run` with one --out: the second is refused at once (exit 3), the
                  first measures only its own servers
  sigterm-load    SIGTERM during a load run ends `kvgate run` within seconds, run `interrupted`
  qa-errors       every QA request failing (prompts past the context) is not a QA PASS
  html-comment    "<!--" and "</script>" in the data leave report.html's data parseable
  url-password    a password in a policy URL is in no output, report or history byte
  idle-conns      idle connections past the open-file limit get 503, not a server that hangs
  half-close      a client that half-closes after its request gets its answer
  head            HEAD gets GET's headers and no body
  readkv-on-fp8   an fp8 server refuses a `readkv` read policy instead of echoing it
  policy-dir      `--policy DIR` says it is a directory
Probes that held up and must keep holding: malformed HTTP gets a 4xx JSON and the server keeps
serving; a trickled request (slowloris) is cut at the idle timeout; a full queue answers 429
with Retry-After.

usage: hostile_test.py KVGATE_BINARY
"""
import json
import os
import re
import resource
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
import time

failures = []
SECRET = "s3cr3tPW-do-not-log"


def check(condition, what):
    print(("ok   " if condition else "FAIL ") + what, flush=True)
    if not condition:
        failures.append(what)


def policy(name, out_extra="", qa_lengths="[512]", load_requests=2, rate=2.0, pairs=1,
           baseline=None):
    base = baseline or 'kind = "local"\nargs = ["--kv", "fp8", "--threads", "1"]'
    return f"""# {out_extra}
name = "{name}"
seed = 5

[baseline]
{base}

[candidate]
kind = "local"
args = ["--kv", "readkv", "--store-bits", "8", "--read-bits", "4", "--threads", "1"]

[slo]
ttft_ms = 5000
tpot_ms = 500

[quality.passkey]
items = 1
lengths = [512]
depths = [0.5]
max_tokens = 8

[quality.qa]
items = 2
lengths = {qa_lengths}
max_tokens = 8

[load]
pairs = {pairs}
rate_rps = {rate}
requests = {load_requests}
warmup = 0
prompt_words = 16
output_tokens = 4
max_duration_s = 120
request_timeout_s = 30

[gates]
passkey_required = 1
bootstrap_resamples = 200
"""


def start_run(work, name, text, out, db, *extra):
    path = f"{work}/{name}.toml"
    with open(path, "w") as f:
        f.write(text)
    return subprocess.Popen([KVGATE, "run", "--policy", path, "--db", db, "--out", out, *extra],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def serve(*args, soft_fd_limit=None):
    def limit():
        if soft_fd_limit:
            resource.setrlimit(resource.RLIMIT_NOFILE, (soft_fd_limit, soft_fd_limit))
    proc = subprocess.Popen([KVGATE, "serve", "--host", "127.0.0.1", "--port", "0",
                             "--threads", "1", *args],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                            preexec_fn=limit)
    line = proc.stdout.readline()
    match = re.search(r"listening on 127\.0\.0\.1:(\d+)", line)
    if not match:
        proc.kill()
        raise RuntimeError(f"kvgate serve printed {line!r}")
    return proc, int(match.group(1))


def raw(port, data, timeout=5.0, shutdown_write=False):
    """Sends bytes, reads until the server closes or the timeout; returns (bytes, seconds)."""
    start = time.monotonic()
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(data)
        if shutdown_write:
            s.shutdown(socket.SHUT_WR)
        got = read_all(s)
    return got, time.monotonic() - start


def read_all(s):
    """What arrives until the server closes, resets, or the socket's timeout passes."""
    got = b""
    try:
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            got += chunk
    except (socket.timeout, ConnectionResetError):
        pass
    return got


def get(port, path, timeout=5.0, method="GET"):
    request = f"{method} {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode()
    return raw(port, request, timeout)


def status_of(response):
    match = re.match(rb"HTTP/1\.[01] (\d{3})", response)
    return int(match.group(1)) if match else None


def body_of(response):
    return response.split(b"\r\n\r\n", 1)[1] if b"\r\n\r\n" in response else b""


def probe_shared_out_and_sigterm(work):
    out, db = f"{work}/shared-out", f"{work}/shared.db"
    # A load phase of ~60 s (120 requests at 2/s) so the first run is surely still measuring.
    first = start_run(work, "first", policy("first", load_requests=120), out, db)
    lock = f"{out}/.kvgate-run.lock"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not (os.path.exists(lock) and os.path.getsize(lock)):
        time.sleep(0.2)
    second = start_run(work, "second", policy("second"), out, db)
    try:
        _, err = second.communicate(timeout=30)
        check(second.returncode == 3 and "in use by another kvgate run" in err,
              f"shared-out: a second run on the same --out is refused at once (exit "
              f"{second.returncode}: {err.strip()[-200:]!r})")
    except subprocess.TimeoutExpired:
        second.kill()
        check(False, "shared-out: a second run on the same --out was not refused within 30 s")
    # Wait for the first run's load phase, then SIGTERM it.
    deadline = time.monotonic() + 240
    in_load = False
    while time.monotonic() < deadline and first.poll() is None:
        con = sqlite3.connect(db, timeout=10)
        try:
            in_load = con.execute("SELECT count(*) FROM quality_items").fetchone()[0] >= 6
        except sqlite3.Error:
            in_load = False
        con.close()
        if in_load:
            break
        time.sleep(0.5)
    check(in_load, "sigterm-load: the first run reached its load phase")
    time.sleep(3)  # well inside the first load run
    sent = time.monotonic()
    first.send_signal(signal.SIGTERM)
    try:
        first.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        first.kill()
        first.communicate()
    took = time.monotonic() - sent
    check(took < 10, f"sigterm-load: SIGTERM during a load run ends kvgate run in {took:.1f} s")
    check(first.returncode == 3, f"sigterm-load: the stopped run exits 3 ({first.returncode})")
    con = sqlite3.connect(db)
    status = con.execute("SELECT status, status_reason FROM runs ORDER BY id DESC LIMIT 1")
    row = status.fetchone()
    commands = [r[0] for r in con.execute("SELECT server_commands_json FROM runs")]
    con.close()
    check(row is not None and row[0] == "interrupted",
          f"sigterm-load: the run is recorded interrupted ({row})")
    check(len(commands) == 1,
          f"shared-out: only the first run is in the history ({len(commands)} runs)")


def probe_qa_errors_and_html(work):
    out, db = f"{work}/qa-out", f"{work}/qa.db"
    text = policy("qa-errors <!-- x -->", out_extra="<!-- hidden --> </script><script>x</script>",
                  qa_lengths="[20000]")
    run = start_run(work, "qa", text, out, db, "--json")
    stdout, stderr = run.communicate(timeout=600)
    try:
        outcome = json.loads(stdout)
    except json.JSONDecodeError:
        check(False, f"qa-errors: kvgate run printed no JSON ({stderr[-500:]!r})")
        return
    qa = next((g for g in outcome.get("gates", []) if g["gate"] == "qa_f1"), None)
    check(qa is not None and qa["status"] != "PASS",
          f"qa-errors: all QA items failing is not a QA pass ({qa and qa['status']}: "
          f"{qa and qa['reason']})")
    with open(f"{out}/report.json") as f:
        report = json.load(f)
    with open(f"{out}/report.html") as f:
        html = f.read()
    match = re.search(r'<script type="application/json" id="report-data">(.*?)</script>', html,
                      re.S)
    try:
        embedded = json.loads(match.group(1)) if match else None
    except json.JSONDecodeError:
        embedded = None
    check(embedded is not None and embedded.get("run", {}).get("policy_text") ==
          report["run"]["policy_text"] and "<!--" in report["run"]["policy_text"],
          "html-comment: '<!--' and '</script>' in the data leave the page's data parseable")


def probe_url_password(work):
    out, db = f"{work}/pw-out", f"{work}/pw.db"
    baseline = f'kind = "url"\nurl = "http://alice:{SECRET}@127.0.0.1:9/v1"'
    run = start_run(work, "pw", policy("pw", baseline=baseline), out, db)
    stdout, stderr = run.communicate(timeout=120)
    check(run.returncode == 3, f"url-password: the unreachable URL run exits 3 ({run.returncode})")
    places = {"stdout": stdout, "stderr": stderr}
    for name in ("report.json", "report.html"):
        if os.path.exists(f"{out}/{name}"):
            with open(f"{out}/{name}", errors="replace") as f:
                places[name] = f.read()
    for suffix in ("", "-wal"):
        if os.path.exists(db + suffix):
            with open(db + suffix, "rb") as f:
                places["history" + suffix] = f.read().decode("latin-1")
    leaked = [name for name, text in places.items() if SECRET in text]
    # Refused as a bad policy (user info in a URL is not supported) before any run is recorded,
    # or recorded and refused: either way the password is in no byte kvgate wrote.
    refused_early = "user info in the URL" in stderr
    check(refused_early or "history" in places,
          f"url-password: refused naming the user info, or the history examined ({sorted(places)})")
    check(not leaked, f"url-password: the password is in none of {sorted(places)} "
                      f"(leaked in {leaked})")


def probe_server(work):
    # A soft = hard limit of 256 descriptors: the server cannot raise it, and 300 idle
    # connections would exhaust it.
    # Idle connections are cut after 10 s: long enough that a lock-out would show.
    proc, port = serve("--kv", "fp8", "--idle-timeout", "10", "--max-batch", "1",
                       "--max-waiting", "0", soft_fd_limit=256)
    try:
        idle = []
        for _ in range(300):
            try:
                idle.append(socket.create_connection(("127.0.0.1", port), timeout=2))
            except OSError:
                break
        response, took = get(port, "/health", timeout=5)
        check(status_of(response) in (200, 503) and took < 3,
              f"idle-conns: with {len(idle)} idle connections a new client is answered "
              f"({status_of(response)}) in {took:.2f} s")
        if status_of(response) == 503:
            body = json.loads(body_of(response))
            check(body["error"]["code"] == "too_many_connections",
                  f"idle-conns: the 503 says too_many_connections ({body})")
        for s in idle:
            s.close()
        ok = False
        for _ in range(50):
            response, _ = get(port, "/health")
            if status_of(response) == 200:
                ok = True
                break
            time.sleep(0.1)
        check(ok, "idle-conns: service resumes once the idle connections close")

        body = json.dumps({"prompt": "Hello", "max_tokens": 4, "temperature": 0}).encode()
        request = (b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json"
                   b"\r\nContent-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
        response, _ = raw(port, request, timeout=30, shutdown_write=True)
        check(status_of(response) == 200 and b'"choices"' in response,
              f"half-close: a half-closed client gets its answer ({response[:60]!r})")

        response, _ = get(port, "/health", method="HEAD")
        headers = response.split(b"\r\n\r\n", 1)
        check(status_of(response) == 200 and (len(headers) == 2 and headers[1] == b""),
              f"head: HEAD /health gets 200 and no body ({response!r})")

        body = json.dumps({"prompt": "x", "max_tokens": 2, "readkv": {"read_bits": 2}}).encode()
        request = (b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
                   b"Content-Type: application/json\r\nContent-Length: " + str(len(body)).encode()
                   + b"\r\n\r\n" + body)
        response, _ = raw(port, request, timeout=30)
        check(status_of(response) == 400 and b"readkv_not_supported" in response,
              f"readkv-on-fp8: refused ({response[:120]!r})")

        # Probes that held up. Malformed HTTP: a 4xx JSON error, and the server keeps serving.
        for bad in (b"GARBAGE\r\n\r\n", b"GET / HTTP/9.9\r\n\r\n",
                    b"POST /v1/completions HTTP/1.1\r\nContent-Length: -5\r\n\r\n",
                    b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
                    b"Content-Length: 5\r\n\r\n{{{{{",
                    b"GET /health HTTP/1.1\r\nHost: x\r\nX: " + b"a" * 40000 + b"\r\n\r\n"):
            response, _ = raw(port, bad, timeout=5)
            code = status_of(response)
            check(code is not None and 400 <= code < 500 and b'"error"' in response,
                  f"malformed: {bad[:30]!r}... answered {code}")
        check(status_of(get(port, "/health")[0]) == 200, "malformed: the server still serves")
        # Slowloris: a request trickled in, never finished, is cut at the idle timeout (10 s).
        start = time.monotonic()
        with socket.create_connection(("127.0.0.1", port), timeout=20) as s:
            s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n")
            try:
                closed = s.recv(1) == b""
            except (socket.timeout, ConnectionResetError):
                closed = False
        took = time.monotonic() - start
        check(closed and took < 15, f"slowloris: cut after {took:.1f} s (idle timeout 10 s)")
        # Overload: one in the batch, none waiting: the others get 429 with Retry-After.
        body = json.dumps({"prompt": "Hi", "max_tokens": 64, "ignore_eos": True}).encode()
        request = (b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
                   b"Content-Type: application/json\r\nContent-Length: " + str(len(body)).encode()
                   + b"\r\n\r\n" + body)
        socks = [socket.create_connection(("127.0.0.1", port), timeout=30) for _ in range(4)]
        for s in socks:
            s.sendall(request)
        answers = []
        for s in socks:
            answers.append(read_all(s))
            s.close()
        refused = [a for a in answers if status_of(a) == 429]
        check(refused and all(b"Retry-After:" in a for a in refused),
              f"overload: {len(refused)} of 4 got 429 with Retry-After")
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()


def probe_policy_dir(work):
    run = subprocess.run([KVGATE, "run", "--policy", work, "--db", f"{work}/d.db", "--out",
                          f"{work}/d-out"], capture_output=True, text=True, timeout=60)
    check(run.returncode == 3 and "is a directory" in run.stderr,
          f"policy-dir: --policy DIR says so ({run.stderr.strip()!r})")


def main():
    with tempfile.TemporaryDirectory(prefix="kvgate_hostile_") as work:
        probe_policy_dir(work)
        probe_server(work)
        probe_url_password(work)
        probe_qa_errors_and_html(work)
        probe_shared_out_and_sigterm(work)
    print(f"{len(failures)} failed" if failures else "all hostile probes passed", flush=True)
    return 1 if failures else 0


if __name__ == "__main__":
    KVGATE = sys.argv[1]
    sys.exit(main())
