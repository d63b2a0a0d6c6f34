#!/usr/bin/env python3
"""The Python client kit (clients/python) against real servers: pip-installs it from the
repository into a scratch directory, then holds conversations with strata.client.Session —
answers equal a cache-off server's, returning turns reuse the session's KV, a turn sent
while the server restarts waits for it, UNAVAILABLE before the first token is retried, and
docs/API.md's gateway example runs as written."""
import argparse
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    def __init__(self, binary, work, name, flags):
        self.port_file = os.path.join(work, name + ".ports")
        if os.path.exists(self.port_file):
            os.remove(self.port_file)
        self.proc = subprocess.Popen(
            [binary, "serve", "--device=cpu", "--metrics_port=0", "--port_file=" + self.port_file] + flags,
            stdout=open(os.path.join(work, name + ".log"), "a"), stderr=subprocess.STDOUT)
        deadline = time.time() + 120
        while time.time() < deadline:
            if os.path.exists(self.port_file) and os.path.getsize(self.port_file) > 0:
                self.port, self.metrics_port = (int(x) for x in open(self.port_file).read().split()[:2])
                return
            if self.proc.poll() is not None:
                raise RuntimeError("strata serve %s exited (%d)" % (name, self.proc.returncode))
            time.sleep(0.1)
        raise RuntimeError("strata serve %s did not listen" % name)

    @property
    def target(self):
        return "127.0.0.1:%d" % self.port

    def stop(self):
        self.proc.terminate()
        self.proc.wait(timeout=60)


def check(cond, what, failures):
    if not cond:
        failures.append(what)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--strata", required=True)
    ap.add_argument("--client", required=True, help="clients/python")
    args = ap.parse_args()
    work = tempfile.mkdtemp(prefix="strata-pyclient-")
    servers = []
    failures = []
    try:
        site = os.path.join(work, "site")
        pip = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation",
                              "--no-index", "--target", site, args.client], capture_output=True, text=True)
        if pip.returncode != 0:
            print("SKIP: pip cannot install the client here (needs pip and setuptools):\n" + pip.stderr[-2000:])
            return 0
        sys.path.insert(0, site)
        from strata.client import Session, TurnError  # noqa: E402 (installed just now)
        import strata  # noqa: E402
        check(strata.__file__.startswith(site), "imported the repository's copy, not the installed one: "
              + strata.__file__, failures)

        cached = Server(args.strata, work, "cached", ["--port=0"])
        servers.append(cached)
        off = Server(args.strata, work, "off", ["--port=0", "--cache=off"])
        servers.append(off)
        a = Session(cached.target, "py-1", system="You are a helpful assistant.", max_new_tokens=12)
        b = Session(off.target, "py-1", system="You are a helpful assistant.", max_new_tokens=12)
        for turn, text in enumerate(["Hello there", "Tell me more", "And finally?"]):
            pieces = list(a.stream(text))
            answer = "".join(pieces)
            check(answer == b.send(text), "turn %d: the answer differs from the cache-off server's" % turn, failures)
            check(a.messages[-1] == ("assistant", answer), "the answer was not kept verbatim", failures)
            if turn > 0:
                check(a.last.usage.cached_tokens > 0, "turn %d reused nothing" % turn, failures)
            check(b.last.usage.cached_tokens == 0, "the cache-off server reused tokens", failures)
        check(len(a.messages) == 7, "conversation of %d messages, want 7" % len(a.messages), failures)

        # stream_turns: the same conversation on one ChatSession stream answers the same,
        # reuses the session's KV from HBM, and is one call by the server's count.
        import urllib.request  # noqa: E402

        def streams_ended(server, code):
            body = urllib.request.urlopen("http://127.0.0.1:%d/metrics" % server.metrics_port).read().decode()
            key = 'strata_requests_total{code="%s",method="strata.v1.ChatService/ChatSession"} ' % code
            return sum(float(line.split()[-1]) for line in body.splitlines() if line.startswith(key))
        ok_before = streams_ended(cached, "ok")
        with Session(cached.target, "py-s", system="You are a helpful assistant.", max_new_tokens=12,
                     stream_turns=True) as streamed:
            for turn, text in enumerate(["Hello there", "Tell me more", "And finally?"]):
                answer = "".join(streamed.stream(text))
                check(answer == a.messages[2 * turn + 2][1],
                      "stream turn %d: the answer differs from the Chat session's" % turn, failures)
                if turn > 0:
                    check(streamed.last.cache_tier == 1, "stream turn %d came from tier %d, not HBM"
                          % (turn, streamed.last.cache_tier), failures)
            check(streamed.messages == a.messages, "the streamed conversation differs", failures)
        check(streams_ended(cached, "ok") == ok_before + 1,
              "three turns and a close were %g ChatSession calls" % (streams_ended(cached, "ok") - ok_before), failures)

        # A streamed turn past timeout_s is DEADLINE_EXCEEDED at once and leaves the
        # conversation as it was; the next turn opens a new stream and is answered.
        slow = Session(cached.target, "py-slow", max_new_tokens=2000, stream_turns=True, timeout_s=0.3)
        started = time.time()
        try:
            slow.send("Write a very long story about the river, the hills and the mill.")
            failures.append("a 2000-token turn finished within 0.3 s")
        except TurnError as e:
            check(e.code.name == "DEADLINE_EXCEEDED", "a turn past its timeout gave %s" % e, failures)
        check(time.time() - started < 5, "the timeout took %.1f s to end the turn" % (time.time() - started),
              failures)
        check(slow.messages == [], "a timed-out turn stayed in the conversation", failures)
        slow.max_new_tokens, slow.timeout_s = 6, 60
        check(slow.send("Hello") != "" and len(slow.messages) == 2, "the turn after a timeout", failures)
        slow.close()

        # The gateway example of docs/API.md, run as written against this server.
        doc = open(os.path.join(args.client, "..", "..", "docs", "API.md")).read()
        example = doc.split("```python\n", 1)[1].split("```", 1)[0]
        exec(compile(example.replace("127.0.0.1:7070", cached.target), "docs/API.md", "exec"), {})

        import grpc  # noqa: E402 (the installed client's dependency)

        # A conversation past a small window is cut by the server and goes on (the session
        # keeps sending all of it); asked to reject, the same conversation is refused.
        small = Server(args.strata, work, "small", ["--port=0", "--model=random:builtin", "--max_context=192"])
        servers.append(small)
        long_chat = Session(small.target, "py-long", max_new_tokens=16)
        cut = 0
        for turn in range(12):
            long_chat.send("Turn %d: tell me one more thing about the river and the hills." % turn)
            cut = max(cut, long_chat.last.truncated_tokens)
        check(cut > 0, "twelve turns in a 192-token window were never cut", failures)
        check(len(long_chat.messages) == 24, "the session dropped messages of its own", failures)
        strict = Session(small.target, "py-strict", max_new_tokens=16, context_overflow="reject")
        strict.messages = list(long_chat.messages)
        try:
            strict.send("And now?")
            failures.append("a conversation past the window was answered with context_overflow=reject")
        except TurnError as e:
            check(e.code == grpc.StatusCode.INVALID_ARGUMENT, "reject gave %s" % e.code, failures)

        # A batch (strata.batch): each answer equals that prompt alone on the cache-off
        # server; a bad prompt gets its own error; the plan shares the system prompt.
        from strata.batch import Batch  # noqa: E402
        system = "You are a helpful assistant who answers questions about rivers, hills and mills. " * 3
        questions = ["Where is the mill?", "How high is the hill?", "What does the river carry?"]
        prompts = [{"id": "q%d" % i, "messages": [("system", system), ("user", q)], "max_new_tokens": 10}
                   for i, q in enumerate(questions)]
        prompts.append({"id": "bad", "token_ids": [72, 10 ** 6]})
        batch = Batch(cached.target)
        results = {r.id: r for r in batch.run(prompts)}
        check(sorted(results) == ["bad", "q0", "q1", "q2"], "batch results: %s" % sorted(results), failures)
        check(results["bad"].HasField("error") and results["bad"].error.code == grpc.StatusCode.INVALID_ARGUMENT.value[0],
              "the bad prompt's error: %s" % results["bad"].error, failures)
        for i, q in enumerate(questions):
            alone = Session(off.target, "py-batch-%d" % i, system=system, max_new_tokens=10)
            check(results["q%d" % i].text == alone.send(q), "batch answer %d differs from the prompt alone" % i, failures)
            check(results["q%d" % i].usage.cached_tokens > 0, "batch prompt %d read no shared prefix" % i, failures)
        check(batch.plan is not None and batch.plan.groups == 1 and batch.plan.token_saving_ratio > 0.3,
              "batch plan: %s" % batch.plan, failures)
        check(batch.summary is not None and batch.summary.completed == 3 and batch.summary.failed == 1,
              "batch summary: %s" % batch.summary, failures)

        # A bad request is raised, and leaves the conversation as it was.
        bad = Session(cached.target, "py-bad", max_new_tokens=0)
        try:
            bad.send("hi")
            failures.append("max_new_tokens=0 was accepted")
        except TurnError as e:
            check(e.code.name == "INVALID_ARGUMENT", "bad request: %s" % e, failures)
        check(bad.messages == [], "a failed turn stayed in the conversation", failures)

        # The server restarts between two turns: the second is retried until it is back.
        port = free_port()
        restarting = Server(args.strata, work, "restarting", ["--port=%d" % port])
        servers.append(restarting)
        s = Session(restarting.target, "py-2", max_new_tokens=6, retries=8, backoff_s=0.2)
        s.send("First")
        restarting.stop()
        def bring_back():
            time.sleep(1.0)
            servers.append(Server(args.strata, work, "restarting", ["--port=%d" % port]))
        t = threading.Thread(target=bring_back)
        t.start()
        s.send("Second")
        t.join()
        check(len(s.messages) == 4, "the turn across the restart is in the conversation once", failures)
        # The same with the turns on a stream: the restart ends it between turns, and the
        # next turn opens another once the server is back.
        st = Session(restarting.target, "py-3", max_new_tokens=6, retries=8, backoff_s=0.2, stream_turns=True)
        st.send("First")
        servers[-1].stop()
        t = threading.Thread(target=bring_back)
        t.start()
        st.send("Second")
        t.join()
        check(len(st.messages) == 4, "the streamed turn across the restart is in the conversation once", failures)
        st.close()

        # UNAVAILABLE before the first token (a draining server) is retried; after tokens
        # have streamed it is raised. A stub that fails as told stands in for the server.
        import grpc  # noqa: E402
        from strata.v1 import chat_pb2  # noqa: E402

        class Unavailable(grpc.RpcError):
            def code(self):
                return grpc.StatusCode.UNAVAILABLE

            def details(self):
                return "the server is shutting down"

        class FlakyStub:
            def __init__(self, failures_before_answer, fail_mid_stream=False):
                self.left = failures_before_answer
                self.mid = fail_mid_stream
                self.calls = 0

            def Chat(self, request, **kwargs):
                self.calls += 1
                if self.left > 0:
                    self.left -= 1
                    raise Unavailable()
                def events():
                    yield chat_pb2.ChatEvent(delta=chat_pb2.TokenDelta(text="ok"))
                    if self.mid:
                        raise Unavailable()
                    yield chat_pb2.ChatEvent(done=chat_pb2.ChatDone())
                return events()

        flaky = Session("unused:1", "f", retries=3, backoff_s=0.01)
        flaky._stub = FlakyStub(2)
        check(flaky.send("x") == "ok" and flaky.attempts == 3, "UNAVAILABLE was not retried", failures)
        flaky = Session("unused:1", "f", retries=1, backoff_s=0.01)
        flaky._stub = FlakyStub(5)
        try:
            flaky.send("x")
            failures.append("retries beyond the limit")
        except TurnError as e:
            check(e.code == grpc.StatusCode.UNAVAILABLE and flaky._stub.calls == 2, "retry limit", failures)
        flaky = Session("unused:1", "f", retries=3, backoff_s=0.01)
        flaky._stub = FlakyStub(0, fail_mid_stream=True)
        try:
            flaky.send("x")
            failures.append("a turn that failed mid-stream was not raised")
        except TurnError:
            check(flaky._stub.calls == 1, "a turn that had streamed tokens was replayed", failures)
            check(flaky.messages == [], "a failed turn stayed in the conversation", failures)
        print("python client: %d checks failed" % len(failures))
    finally:
        for srv in servers:
            if srv.proc.poll() is None:
                srv.stop()
        if failures:
            for name in ("cached", "off", "restarting"):
                path = os.path.join(work, name + ".log")
                if os.path.exists(path):
                    print("---- %s.log (tail)" % name)
                    print("".join(open(path, errors="replace").readlines()[-15:]))
        shutil.rmtree(work, ignore_errors=True)
    for f in failures:
        print("FAIL: " + f)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
