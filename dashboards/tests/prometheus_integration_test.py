#!/usr/bin/env python3
"""The dashboards against a real Prometheus scraping real servers.

Starts, all on 127.0.0.1 with free ports: `kvgate serve --kv fp8` (job baseline),
`kvgate serve --kv readkv ...` (job candidate), the suite metrics feeder (job suite; a
kvgate::suite::RunMetrics, as `kvgate run --metrics-port` serves it), the Pushgateway when
installed (the feeder pushes the final gate results there), and Prometheus itself with a test copy
of dashboards/prometheus.yml (1 s scrape and evaluation, the committed rules). Then it drives a
short closed-loop load against both servers with `kvgate load` and checks:

  (a) every metric named in the Grafana dashboards and in the rules exists in Prometheus (no dead
      panel, no dead rule; recording-rule names count once the rules have run);
  (b) the P99 TTFT Prometheus derives from each server's histogram agrees with the load
      generator's P99 within the bucket resolution. Like is compared with like: the server times
      a request from its arrival (the HTTP request read in full, vLLM's arrival_time) to the end
      of the decode step that produced its first token, so the client's interval to compare is
      the *actual* send to the first token chunk (the load generator's own TTFT counts from the
      scheduled send time, which adds the client's send lag). That client interval contains the
      server's, longer only by the loopback transfer and the hand-off of the first chunk to the
      socket (well under 1 ms idle, up to ~15 ms seen on a loaded 2-core runner; it was 40 ms
      more while the server's sockets had Nagle on), so per request server <= client. Resolution,
      precisely: with bounds b[0] < b[1] < ... and the client P99 in bucket k = (b[k-1], b[k]],
      histogram_quantile(0.99) must lie in [b[k-2], b[k]] -- the client's bucket or the one
      just below it (adjacent bounds are 4.4% apart), never above the client's bucket;
  (c) headless Chromium renders Prometheus's graph page for the P99 TTFT query to a non-blank
      PNG (saved as prometheus_graph.png in --out).

Exit 77 (CTest SKIP) only when prometheus or promtool is not installed.
Usage: prometheus_integration_test.py --kvgate BIN --feeder BIN --dashboards DIR --out DIR
"""
import argparse
import json
import math
import os
import pathlib
import re
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request
import zlib

import metric_names

SKIP = 77
REQUESTS = 30
TTFT_METRIC = "vllm:time_to_first_token_seconds"


def log(message):
    print(f"[{time.strftime('%H:%M:%S')}] {message}", flush=True)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http_get(url, timeout=5.0):
    with urllib.request.urlopen(url, timeout=timeout) as response:
        return response.status, response.read()


class Processes:
    """Children started by the test; all are stopped (SIGTERM, then SIGKILL) at the end."""

    def __init__(self, workdir):
        self.workdir = workdir
        self.children = []

    def start(self, name, argv):
        log_path = self.workdir / f"{name}.log"
        handle = open(log_path, "wb")
        proc = subprocess.Popen(argv, stdout=handle, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, cwd=self.workdir)
        self.children.append((name, proc, log_path))
        return proc, log_path

    def stop_all(self):
        for _, proc, _ in reversed(self.children):
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + 20
        for name, proc, _ in reversed(self.children):
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                log(f"{name} ignored SIGTERM; killing it")
                proc.kill()
                proc.wait()


def wait_for_line(proc, log_path, pattern, timeout, name):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        text = log_path.read_text(errors="replace")
        match = re.search(pattern, text)
        if match:
            return match
        if proc.poll() is not None:
            break
        time.sleep(0.2)
    raise RuntimeError(f"{name} did not print /{pattern}/ within {timeout} s; it printed:\n"
                       + log_path.read_text(errors="replace")[-3000:])


def wait_ready(url, timeout, name):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if http_get(url, timeout=2)[0] == 200:
                return
        except OSError:
            pass
        time.sleep(0.2)
    raise RuntimeError(f"{name} not ready at {url} within {timeout} s")


def test_config(dashboards, targets, rule_dir):
    """dashboards/prometheus.yml with the test's targets, 1 s intervals and absolute rule paths."""
    text = (dashboards / "prometheus.yml").read_text()
    for placeholder, actual in targets.items():
        if placeholder not in text:
            raise RuntimeError(f"prometheus.yml has no target {placeholder} to replace")
        text = text.replace(placeholder, actual)
    text = re.sub(r"(scrape_interval|evaluation_interval): \d+s", r"\1: 1s", text)
    text = text.replace("rules/", f"{rule_dir}/")
    return text


class PrometheusApi:
    def __init__(self, base):
        self.base = base

    def query(self, expr):
        url = f"{self.base}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
        status, body = http_get(url, timeout=10)
        answer = json.loads(body)
        if status != 200 or answer.get("status") != "success":
            raise RuntimeError(f"query {expr!r} failed: {body[:300]!r}")
        return answer["data"]["result"]

    def scalar(self, expr):
        result = self.query(expr)
        if len(result) != 1:
            raise RuntimeError(f"query {expr!r} returned {len(result)} series, expected 1")
        return float(result[0]["value"][1])


def png_pixels(path):
    """(width, height, rows of pixel tuples) of an 8-bit RGB/RGBA PNG, without PIL."""
    data = path.read_bytes()
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        raise RuntimeError(f"{path} is not a PNG")
    pos, idat = 8, b""
    width = height = depth = color = None
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos:pos + 8])
        chunk = data[pos + 8:pos + 8 + length]
        if kind == b"IHDR":
            width, height, depth, color = struct.unpack(">IIBB", chunk[:10])
        elif kind == b"IDAT":
            idat += chunk
        pos += 12 + length
    if depth != 8 or color not in (2, 6):
        raise RuntimeError(f"unsupported PNG: depth {depth}, color type {color}")
    bpp = 3 if color == 2 else 4
    raw = zlib.decompress(idat)
    stride = width * bpp
    rows, prev = [], bytearray(stride)
    for y in range(height):
        filt = raw[y * (stride + 1)]
        line = bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for i in range(stride):
            a = line[i - bpp] if i >= bpp else 0
            b = prev[i]
            c = prev[i - bpp] if i >= bpp else 0
            if filt == 1:
                line[i] = (line[i] + a) & 0xFF
            elif filt == 2:
                line[i] = (line[i] + b) & 0xFF
            elif filt == 3:
                line[i] = (line[i] + (a + b) // 2) & 0xFF
            elif filt == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 0xFF
        rows.append(bytes(line))
        prev = line
    return width, height, bpp, rows


def check_screenshot(path, failures):
    width, height, bpp, rows = png_pixels(path)
    colors, counts = set(), {}
    for row in rows[::2]:  # every other row: plenty for "is anything drawn"
        for x in range(0, len(row), bpp * 2):
            px = row[x:x + 3]
            colors.add(px)
            counts[px] = counts.get(px, 0) + 1
    dominant = max(counts.values()) / sum(counts.values())
    # What a drawn chart adds below the middle of the page (axes, grid, lines, the dark legend):
    # dark pixels, and strongly coloured ones that are not the page's blue buttons. An empty
    # result draws none of it and shows Bootstrap's pink "No datapoints found." instead.
    lower = [row[x:x + 3] for row in rows[height // 2:] for x in range(0, len(row), bpp)]
    dark = sum(1 for px in lower if min(px) < 200)
    lines = sum(1 for px in lower
                if max(px) - min(px) > 80 and not (px[2] > 200 and px[0] < 60))
    no_data = sum(1 for row in rows for x in range(0, len(row), bpp)
                  if row[x:x + 3] == bytes((248, 215, 218)))
    log(f"screenshot {path.name}: {width}x{height}, {len(colors)} distinct colours, dominant "
        f"colour {dominant:.0%}; chart half: {dark} dark, {lines} line-coloured pixels; "
        f"{no_data} 'no data' pixels")
    if len(colors) < 16 or dominant > 0.98:
        failures.append(f"screenshot looks blank: {len(colors)} colours, dominant {dominant:.0%}")
    if dark < 10000 or lines < 500 or no_data > 1000:
        failures.append(f"screenshot shows no plotted series ({dark} dark and {lines} coloured "
                        f"pixels in the chart half, {no_data} 'no data' pixels)")


def bucket_bounds(api, job):
    result = api.query(f'{TTFT_METRIC}_bucket{{job="{job}"}}')
    return sorted(float(s["metric"]["le"]) for s in result if s["metric"]["le"] != "+Inf")


def client_ttft_p99_from_send(load_json):
    """P99 of (first token chunk - request sent) over the measured requests, floor(n*p) rule.

    The server's histogram times from the request's arrival, so the client-side interval to
    compare it with starts when the request was sent, not when it was scheduled (the load
    generator's TTFT): under a busy runner the two differ by the client's own queueing.
    """
    records = json.loads(load_json.read_text())["records"]
    ttfts = sorted((r["first_token_ns"] - r["sent_ns"]) / 1e9 for r in records
                   if not r["warmup"] and r["first_token_ns"] >= 0 and r["sent_ns"] >= 0)
    return ttfts[min(len(ttfts) - 1, int(len(ttfts) * 0.99))]


TIMELINE = re.compile(r"ttft_timeline received_steady_ns=(\d+) submitted_ms=([-\d.]+) "
                      r"first_token_ms=([-\d.]+) first_text_ms=([-\d.]+) "
                      r"first_text_written_ms=([-\d.]+)")


def log_slowest_timelines(job, load_json, server_log, count=3):
    """Where the time of the slowest first tokens went, per request, client and server side.

    The server logs (debug) each streamed request's arrival on CLOCK_MONOTONIC and its stages in
    ms after it; the load JSON has its time zero on the same clock (start_steady_ns), so each
    record is matched to the server arrival nearest to its send. Evidence for a failed (b).
    """
    load = json.loads(load_json.read_text())
    zero = load["start_steady_ns"]
    stages = [(int(m.group(1)), *map(float, m.group(2, 3, 4, 5)))
              for m in TIMELINE.finditer(server_log.read_text(errors="replace"))]
    records = [r for r in load["records"]
               if not r["warmup"] and r["first_token_ns"] >= 0 and r["sent_ns"] >= 0]
    if not stages or not records:
        log(f"{job}: no per-request timelines to show (server log without ttft_timeline lines)")
        return
    records.sort(key=lambda r: r["first_token_ns"] - r["sent_ns"], reverse=True)
    for r in records[:count]:
        sent = zero + r["sent_ns"]
        received, submitted, first_token, first_text, written = min(
            stages, key=lambda s: abs(s[0] - sent))
        client_first = (zero + r["first_token_ns"] - received) / 1e6
        log(f"{job}: request {r['index']}: client TTFT from send "
            f"{(r['first_token_ns'] - r['sent_ns']) / 1e6:.1f} ms = send->arrival "
            f"{(received - sent) / 1e6:.2f} + arrival->submitted {submitted:.2f} "
            f"+ ->first token {first_token - submitted:.1f} (server TTFT {first_token:.1f}) "
            f"+ ->first text "
            f"{first_text - first_token:.1f} + ->written {written - first_text:.2f} "
            f"+ ->client read {client_first - written:.2f} ms")


def check_p99(api, job, load_json, server_log, failures):
    client_p99 = client_ttft_p99_from_send(load_json)
    count = api.scalar(f'sum({TTFT_METRIC}_count{{job="{job}"}})')
    # The servers started fresh for this test, so the cumulative buckets hold exactly its load.
    prom_p99 = api.scalar(f'histogram_quantile(0.99, sum by (le) '
                          f'({TTFT_METRIC}_bucket{{job="{job}"}}))')
    bounds = bucket_bounds(api, job)
    # The client's bucket (b[k-1], b[k]] and the one below it, (b[k-2], b[k-1]] (see (b) above).
    k = next(i for i, b in enumerate(bounds) if client_p99 <= b)
    low = bounds[k - 2] if k >= 2 else 0.0
    high = bounds[k]
    ok = low <= prom_p99 <= high * (1 + 1e-9)
    log(f"{job}: load generator P99 TTFT (from send) {client_p99 * 1000:.1f} ms in bucket "
        f"({bounds[k - 1] * 1000:.1f}, {high * 1000:.1f}] ms; Prometheus histogram_quantile "
        f"{prom_p99 * 1000:.1f} ms over {count:.0f} requests; accepted range "
        f"[{low * 1000:.1f}, {high * 1000:.1f}] ms -> {'OK' if ok else 'MISMATCH'}")
    log_slowest_timelines(job, load_json, server_log)
    if count != REQUESTS:
        failures.append(f"{job}: the server histogram counted {count:.0f} requests, "
                        f"the load sent {REQUESTS}")
    if not ok:
        failures.append(f"{job}: Prometheus P99 TTFT {prom_p99:.4f} s outside "
                        f"[{low:.4f}, {high:.4f}] s around the load generator's {client_p99:.4f} s")
    # The dashboards' recorded P99 (rate over 5 m) must exist and be a number for this job too.
    recorded = api.query(f'job:vllm_time_to_first_token_seconds:p99_5m{{job="{job}"}}')
    if not recorded or math.isnan(float(recorded[0]["value"][1])):
        failures.append(f"{job}: job:vllm_time_to_first_token_seconds:p99_5m has no value")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--kvgate", required=True)
    parser.add_argument("--feeder", required=True)
    parser.add_argument("--dashboards", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--chromium", default=shutil.which("chromium") or "")
    args = parser.parse_args()

    prometheus, promtool = shutil.which("prometheus"), shutil.which("promtool")
    if not prometheus or not promtool:
        print("SKIP: prometheus/promtool not installed (Debian: apt-get install prometheus)")
        return SKIP
    pushgateway = shutil.which("prometheus-pushgateway") or shutil.which("pushgateway")
    dashboards = pathlib.Path(args.dashboards).resolve()
    out = pathlib.Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    failures = []
    started = time.monotonic()

    with tempfile.TemporaryDirectory(prefix="kvgate-prom-") as tmp:
        work = pathlib.Path(tmp)
        procs = Processes(work)
        try:
            # The two servers: built-in model on CPU, one torch thread each (2-core CI).
            servers = {}
            for job, kv_args in (("baseline", ["--kv", "fp8"]),
                                 ("candidate", ["--kv", "readkv", "--store-bits", "8",
                                                "--read-bits", "4", "--reader", "constrained"])):
                # Debug level: each streamed request logs its TTFT stages (ttft_timeline), the
                # evidence printed for the slowest requests in (b).
                proc, log_path = procs.start(job, [args.kvgate, "serve", *kv_args, "--threads",
                                                   "1", "--host", "127.0.0.1", "--port", "0",
                                                   "--log-level", "debug"])
                servers[job] = (proc, log_path)
            urls = {}
            for job, (proc, log_path) in servers.items():
                match = wait_for_line(proc, log_path, r"listening on (127\.0\.0\.1:\d+)", 120, job)
                urls[job] = match.group(1)
                wait_ready(f"http://{urls[job]}/health", 60, job)
            log(f"servers: {urls}")

            gateway = None
            if pushgateway:
                gateway = f"127.0.0.1:{free_port()}"
                procs.start("pushgateway", [pushgateway, f"--web.listen-address={gateway}"])
                wait_ready(f"http://{gateway}/-/ready", 30, "pushgateway")
            else:
                log("prometheus-pushgateway not installed: gate history is checked via job=suite")
            feeder_argv = [args.feeder, "--seconds", "300"]
            if gateway:
                feeder_argv += ["--pushgateway", f"http://{gateway}"]
            feeder, feeder_log = procs.start("feeder", feeder_argv)
            suite = wait_for_line(feeder, feeder_log, r"listening on (127\.0\.0\.1:\d+)", 30,
                                  "feeder").group(1)
            if gateway:
                wait_for_line(feeder, feeder_log, r"pushed", 30, "feeder")

            # Rules and config: the committed files, checked by promtool as CI does.
            rule_dir = work / "rules"
            shutil.copytree(dashboards / "rules", rule_dir)
            config = work / "prometheus.yml"
            config.write_text(test_config(dashboards, {
                "127.0.0.1:8001": urls["baseline"], "127.0.0.1:8002": urls["candidate"],
                "127.0.0.1:9400": suite,
                "127.0.0.1:9091": gateway or f"127.0.0.1:{free_port()}"}, rule_dir))
            subprocess.run([promtool, "check", "config", str(config)], check=True,
                           stdout=subprocess.DEVNULL)
            prom_addr = f"127.0.0.1:{free_port()}"
            procs.start("prometheus", [prometheus, f"--config.file={config}",
                                       f"--storage.tsdb.path={work / 'tsdb'}",
                                       f"--web.listen-address={prom_addr}",
                                       "--log.level=warn"])
            wait_ready(f"http://{prom_addr}/-/ready", 60, "prometheus")
            api = PrometheusApi(f"http://{prom_addr}")
            log(f"prometheus on {prom_addr}")
            prom_started = time.monotonic()
            # The recorded P99 is a rate over counters: Prometheus must hold a sample of every
            # server from before its load, or a load that ends before the first scrape leaves a
            # flat counter (rate 0, quantile NaN). Wait for one scrape of each (bounded).
            deadline = time.monotonic() + 60
            while True:
                seen = {r["metric"]["job"] for r in api.query(f"{TTFT_METRIC}_count")}
                if all(job in seen for job in urls):
                    break
                if time.monotonic() > deadline:
                    raise RuntimeError(f"Prometheus did not scrape {sorted(urls)} within 60 s "
                                       f"(scraped: {sorted(seen)})")
                time.sleep(0.5)

            # The load: one server after the other (on a 2-core runner two loaded servers would
            # delay each other's I/O threads, and the client would see tokens later than the
            # server stamps them), bounded by request count and a timeout.
            loads = {}
            for job, url in urls.items():
                json_path = out / f"load_{job}.json"
                loads[job] = (subprocess.Popen(
                    [args.kvgate, "load", "--url", f"http://{url}", "--concurrency", "2",
                     "--requests", str(REQUESTS), "--input-len", "64", "--output-len", "16",
                     "--seed", "7", "--json", str(json_path), "--quiet",
                     # Validity of the schedule is the gates' concern; here a busy runner's
                     # send lag (which only lengthens the client's TTFT) must not fail the run.
                     "--max-send-lag-p99-ms", "1000", "--min-achieved", "0.01"],
                    stdout=open(work / f"load_{job}.log", "wb"), stderr=subprocess.STDOUT),
                    json_path)
                proc = loads[job][0]
                if proc.wait(timeout=240) != 0:
                    raise RuntimeError(f"kvgate load against {job} exited {proc.returncode}:\n"
                                       + (work / f"load_{job}.log").read_text()[-2000:])
            log("load done")

            # Let Prometheus scrape the final counters and run the rules on them (1 s each).
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                counts = api.query(f'sum by (job) ({TTFT_METRIC}_count)')
                done = {r["metric"]["job"]: float(r["value"][1]) for r in counts}
                ready = [r for r in api.query("job:vllm_time_to_first_token_seconds:p99_5m")
                         if not math.isnan(float(r["value"][1]))]
                if (all(done.get(job) == REQUESTS for job in urls) and len(ready) >= 2):
                    break
                time.sleep(1)
            time.sleep(3)  # two more rule evaluations, for the rules built on other rules

            # (a) Every metric the dashboards and rules name exists.
            used = metric_names.all_names(dashboards)
            missing = []
            for name in sorted(used):
                if not api.query(f'count({{__name__="{name}"}})'):
                    missing.append(f"{name} (used by {', '.join(sorted(set(used[name])))})")
            log(f"{len(used) - len(missing)} of {len(used)} metric names exist in Prometheus")
            failures += [f"no series named {m}" for m in missing]
            # Each side shows up under its own job, labelled with its KV backend.
            for job, backend in (("baseline", "fp8"), ("candidate", "readkv")):
                series = api.query(f'vllm:num_requests_running{{job="{job}",kv_backend="{backend}"}}')
                if len(series) != 1:
                    failures.append(f"{job}: no vllm:num_requests_running with kv_backend={backend}")
            if gateway:
                pushed = api.query('kvgate_gate_result{job="kvgate_run",gate="p99",'
                                   'result="fail"}')
                if not pushed or float(pushed[0]["value"][1]) != 1.0:
                    failures.append("the pushed p99 FAIL did not reach Prometheus")

            # (b) P99 TTFT: histogram versus the load generator's own samples.
            for job, (_, json_path) in loads.items():
                check_p99(api, job, json_path, servers[job][1], failures)

            # (c) A screenshot of the graph page for the key query, over the window Prometheus
            # has data for (a fixed 2m window drew a fast run's series too short to tell apart
            # from an empty chart).
            if args.chromium:
                shot = out / "prometheus_graph.png"
                window_s = max(20, int(time.monotonic() - prom_started) + 2)
                query = urllib.parse.urlencode({
                    "g0.expr": "job:vllm_time_to_first_token_seconds:p99_5m",
                    "g0.tab": "0", "g0.range_input": f"{window_s}s"})
                subprocess.run(
                    [args.chromium, "--headless", "--no-sandbox", "--disable-gpu",
                     "--hide-scrollbars", "--window-size=1280,800",
                     "--virtual-time-budget=8000", f"--screenshot={shot}",
                     f"http://{prom_addr}/graph?{query}"],
                    check=True, timeout=90, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                    env=dict(os.environ, HOME=str(work)))
                check_screenshot(shot, failures)
            else:
                failures.append("chromium not found: no screenshot (Debian: apt-get install "
                                "chromium)")
        finally:
            procs.stop_all()
            for name in ("baseline", "candidate", "prometheus", "feeder", "pushgateway"):
                path = work / f"{name}.log"
                if path.exists():
                    shutil.copy(path, out / f"{name}.log")

    for failure in failures:
        print("FAIL:", failure)
    log(f"{'PASS' if not failures else 'FAIL'} in {time.monotonic() - started:.0f} s")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
