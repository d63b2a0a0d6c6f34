#!/usr/bin/env python3
"""`strata chat --interactive` through a terminal (tmux): messages typed, answers streamed,
a status line per turn, the second turn reusing the first's KV, /quit leaving. SKIP without
tmux."""
import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--strata", required=True)
    args = ap.parse_args()
    tmux = shutil.which("tmux")
    if tmux is None:
        print("SKIP: tmux is not installed")
        return 0
    work = tempfile.mkdtemp(prefix="strata-interactive-")
    socket = os.path.join(work, "tmux.sock")
    server = subprocess.Popen([args.strata, "serve", "--device=cpu", "--port=0", "--metrics_port=0",
                               "--port_file=" + work + "/ports"], stdout=open(work + "/serve.log", "w"),
                              stderr=subprocess.STDOUT)
    failures = []

    def pane():
        return subprocess.run([tmux, "-S", socket, "capture-pane", "-p", "-t", "chat", "-S", "-200"],
                              capture_output=True, text=True).stdout

    def wait_for(pattern, what, timeout=60):
        deadline = time.time() + timeout
        while time.time() < deadline:
            if re.search(pattern, pane(), re.S):
                return True
            time.sleep(0.2)
        failures.append("no %s on the screen:\n%s" % (what, pane()))
        return False

    try:
        deadline = time.time() + 60
        while not (os.path.exists(work + "/ports") and os.path.getsize(work + "/ports") > 0):
            if time.time() > deadline:
                raise RuntimeError("strata serve did not start")
            time.sleep(0.1)
        port = open(work + "/ports").read().split()[0]
        subprocess.run([tmux, "-S", socket, "new-session", "-d", "-s", "chat", "-x", "200", "-y", "50",
                        "%s chat --interactive --target=127.0.0.1:%s --session=tty --max_new_tokens=8"
                        % (args.strata, port)], check=True)
        if wait_for(r"you>", "prompt"):
            subprocess.run([tmux, "-S", socket, "send-keys", "-t", "chat", "Hello from a terminal", "Enter"])
            wait_for(r"\[turn 1: TTFT [0-9.]+ ms; \d+ prompt tokens, 0 reused", "first turn's status line")
            subprocess.run([tmux, "-S", socket, "send-keys", "-t", "chat", "And a second message", "Enter"])
            if wait_for(r"\[turn 2: TTFT [0-9.]+ ms; \d+ prompt tokens, \d+ reused", "second turn's status line"):
                reused = int(re.search(r"\[turn 2: [^;]+; \d+ prompt tokens, (\d+) reused", pane()).group(1))
                if reused == 0:
                    failures.append("the second turn reused nothing:\n" + pane())
                if "tier hbm" not in pane() and "tier host" not in pane():
                    failures.append("the second turn's tier is not shown:\n" + pane())
            subprocess.run([tmux, "-S", socket, "send-keys", "-t", "chat", "/quit", "Enter"])
            deadline = time.time() + 10
            while time.time() < deadline:
                alive = subprocess.run([tmux, "-S", socket, "has-session", "-t", "chat"], capture_output=True)
                if alive.returncode != 0:
                    break
                time.sleep(0.2)
            else:
                failures.append("/quit did not end the chat")
    finally:
        subprocess.run([tmux, "-S", socket, "kill-server"], capture_output=True)
        server.terminate()
        server.wait(timeout=60)
        shutil.rmtree(work, ignore_errors=True)
    for f in failures:
        print("FAIL: " + f)
    print("interactive chat: %d failures" % len(failures))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
