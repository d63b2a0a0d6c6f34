#!/usr/bin/env python3
"""Smoke test of deploy/prometheus and deploy/grafana against a live strata.

Starts `strata serve` (CPU, with an SSD tier) and a real Prometheus (Debian's package)
scraping it every second with deploy/prometheus's recording rules and alerts, drives chats
with `strata bench`, then asks Prometheus's HTTP API for:
  - every rule's health (a rule that errors fails the test),
  - every recording rule's series (none: fails),
  - every metric an alert expression names (an unknown name fails; the alerts themselves
    need not fire),
  - every dashboard query of deploy/grafana/strata.json with $instance set (none: fails).
Exits 0 with a SKIP line when Prometheus is not installed.
"""
import argparse
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def api(port, path, **params):
    url = "http://127.0.0.1:%d%s?%s" % (port, path, urllib.parse.urlencode(params))
    try:
        with urllib.request.urlopen(url, timeout=10) as r:
            body = json.loads(r.read())
    except urllib.error.HTTPError as e:  # a query Prometheus refuses: say which and why
        raise RuntimeError("%s: HTTP %d: %s" % (params, e.code, e.read().decode(errors="replace")))
    if body.get("status") != "success":
        raise RuntimeError("%s: %s" % (url, body))
    return body["data"]


def wait_for(what, check, timeout):
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            if check():
                return
        except Exception:  # not up yet
            pass
        time.sleep(0.5)
    raise RuntimeError("timed out waiting for " + what)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--strata", required=True)
    ap.add_argument("--prometheus", default="/usr/bin/prometheus")
    ap.add_argument("--deploy", required=True, help="the repository's deploy/ directory")
    args = ap.parse_args()
    if not os.access(args.prometheus, os.X_OK):
        print("SKIP: Prometheus is not installed (%s); Debian: apt-get install prometheus" % args.prometheus)
        return 0

    work = tempfile.mkdtemp(prefix="strata-prom-smoke-")
    procs = []
    failures = []
    try:
        os.makedirs(work + "/ssd")
        port_file = work + "/ports"
        strata = subprocess.Popen(
            [args.strata, "serve", "--device=cpu", "--port=0", "--metrics_port=0", "--port_file=" + port_file,
             "--ssd_dirs=" + work + "/ssd", "--ssd_capacity_bytes=268435456", "--host_cache_bytes=67108864",
             "--min_shared_prompt_tokens=64"],
            stdout=open(work + "/strata.log", "w"), stderr=subprocess.STDOUT)
        procs.append(strata)
        wait_for("strata's ports", lambda: os.path.getsize(port_file) > 0, 120)
        grpc_port, metrics_port = open(port_file).read().split()
        instance = "127.0.0.1:" + metrics_port

        prom_port = free_port()
        rules = os.path.abspath(os.path.join(args.deploy, "prometheus"))
        with open(work + "/prometheus.yml", "w") as f:
            f.write("global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
                    "rule_files:\n  - %s/rules.yml\n  - %s/alerts.yml\n"
                    "scrape_configs:\n  - job_name: strata\n    static_configs:\n      - targets: ['%s']\n"
                    % (rules, rules, instance))
        prom = subprocess.Popen(
            [args.prometheus, "--config.file=" + work + "/prometheus.yml", "--storage.tsdb.path=" + work + "/tsdb",
             "--web.listen-address=127.0.0.1:%d" % prom_port],
            stdout=open(work + "/prometheus.log", "w"), stderr=subprocess.STDOUT)
        procs.append(prom)
        wait_for("Prometheus to scrape strata",
                 lambda: api(prom_port, "/api/v1/query", query='up{job="strata"}')["result"][0]["value"][1] == "1", 90)

        # Load: sessions with a shared system prompt, several turns each (hits from HBM and
        # host, TTFT by tier, inter-token latency, bytes to SSD).
        for seed in (1, 2):
            subprocess.run(
                [args.strata, "bench", "--target=127.0.0.1:" + grpc_port, "--metrics_target=" + instance,
                 "--sessions=12", "--rate=20", "--turns=3", "--prompt_tokens=32", "--output_tokens=8",
                 "--think_s=0.2", "--system_prompts=2", "--system_prompt_tokens=96", "--seed=%d" % seed],
                check=True, stdout=subprocess.DEVNULL, stderr=open(work + "/bench.log", "a"))
        time.sleep(5)  # a few more scrapes and rule evaluations

        groups = api(prom_port, "/api/v1/rules")["groups"]
        recording, alerts = [], []
        for g in groups:
            for r in g["rules"]:
                if r.get("health") == "err":
                    failures.append("rule %s errors: %s" % (r["name"], r.get("lastError")))
                (recording if r["type"] == "recording" else alerts).append(r)
        if len(recording) < 10 or len(alerts) < 5:
            failures.append("only %d recording rules and %d alerts loaded" % (len(recording), len(alerts)))
        for r in recording:
            result = api(prom_port, "/api/v1/query", query=r["name"])["result"]
            if not result:
                failures.append("recording rule %s has no series" % r["name"])
        names = set()
        for r in alerts:
            names.update(re.findall(r"\bstrata(?::[a-z0-9_:]+|_[a-z0-9_]+)", r["query"]))
            api(prom_port, "/api/v1/query", query=r["query"])  # evaluates without error
        for name in sorted(names):
            if not api(prom_port, "/api/v1/query", query='count({__name__="%s"})' % name)["result"]:
                failures.append("an alert names %s, which has no series" % name)

        dashboard = json.load(open(os.path.join(args.deploy, "grafana", "strata.json")))
        queries = 0
        for panel in dashboard["panels"]:
            for target in panel["targets"]:
                expr = target["expr"].replace("$instance", instance)  # as Grafana does (a regex)
                queries += 1
                if not api(prom_port, "/api/v1/query", query=expr)["result"]:
                    failures.append("dashboard panel '%s': %s has no series" % (panel["title"], expr))
        var = dashboard["templating"]["list"][1]["definition"]
        metric = re.search(r"label_values\((\w+), instance\)", var).group(1)
        if instance not in api(prom_port, "/api/v1/label/instance/values", **{"match[]": metric}):
            failures.append("the $instance variable (%s) does not list %s" % (var, instance))
        print("checked %d recording rules, %d alerts (%d metric names), %d dashboard queries"
              % (len(recording), len(alerts), len(names), queries))
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()
        if failures:
            for log in ("strata.log", "prometheus.log", "bench.log"):
                path = os.path.join(work, log)
                if os.path.exists(path):
                    print("---- %s (tail)" % log)
                    print("".join(open(path, errors="replace").readlines()[-20:]))
        shutil.rmtree(work, ignore_errors=True)
    for f in failures:
        print("FAIL: " + f)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
