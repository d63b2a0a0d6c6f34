#!/usr/bin/python3
"""End-to-end test from a gateway's point of view: Debian's python3-grpcio talking to a
real `strata serve` process, with stubs generated from strata's .proto files."""
import argparse
import os
import queue
import re
import signal
import subprocess
import sys
import tempfile
import time
import unittest
import urllib.request

ARGS = None


def load_stubs(path):
    sys.path.insert(0, path)
    global grpc, chat_pb2, chat_pb2_grpc, cache_pb2, cache_pb2_grpc
    import grpc  # noqa: F401
    from strata.v1 import chat_pb2, chat_pb2_grpc, cache_pb2, cache_pb2_grpc  # noqa: F401


class Server:
    """A `strata serve` child process on free loopback ports."""

    def __init__(self, *flags):
        self.dir = tempfile.mkdtemp(prefix="strata-py-e2e-")
        port_file = os.path.join(self.dir, "ports")
        self.proc = subprocess.Popen([ARGS.strata, "serve", "--port=0", "--metrics_port=0",
                                      "--port_file=" + port_file, *flags])
        deadline = time.time() + 60
        while time.time() < deadline:
            if os.path.exists(port_file):
                with open(port_file) as f:
                    self.port, self.metrics_port = map(int, f.read().split())
                break
            if self.proc.poll() is not None:
                raise RuntimeError("strata serve exited with %s" % self.proc.returncode)
            time.sleep(0.1)
        else:
            raise RuntimeError("strata serve did not start listening")
        self.channel = grpc.insecure_channel("127.0.0.1:%d" % self.port)
        self.chat = chat_pb2_grpc.ChatServiceStub(self.channel)
        self.cache = cache_pb2_grpc.CacheServiceStub(self.channel)

    def stop(self):
        self.channel.close()
        self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout=30)

    def metrics(self):
        """Samples keyed `name{a="x",b="y"}`, labels sorted by name whatever order they
        were written in (the exposition's order is the server's business)."""
        body = urllib.request.urlopen("http://127.0.0.1:%d/metrics" % self.metrics_port,
                                      timeout=10).read().decode()
        samples = {}
        for line in body.splitlines():
            if not line or line.startswith("#"):
                continue
            m = re.match(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{([^}]*)\})?\s+(\S+)$', line)
            assert m, "unparseable metrics line: %r" % line
            labels = sorted(re.findall(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"', m.group(2) or ""))
            key = m.group(1)
            if labels:
                key += "{" + ",".join('%s="%s"' % kv for kv in labels) + "}"
            samples[key] = float(m.group(3))
        return samples


def turn(server, session, messages, max_new=16):
    req = chat_pb2.ChatRequest(session_id=session, max_new_tokens=max_new,
                               messages=[chat_pb2.Message(role=r, content=c) for r, c in messages])
    tokens, text, done = [], "", None
    for event in server.chat.Chat(req, timeout=180):
        if event.HasField("delta"):
            tokens.extend(event.delta.token_ids)
            text += event.delta.text
        if event.HasField("done"):
            done = event.done
    return tokens, text, done


USER_TURNS = ["Hi! Can you recommend a good book about distributed systems?",
              "Why that one? Keep it short.",
              "Thanks, and one more for beginners?"]


def three_turns(server, session):
    conv, outs = [], []
    for user in USER_TURNS:
        conv.append(("user", user))
        tokens, text, done = turn(server, session, conv)
        outs.append((tokens, text, done))
        conv.append(("assistant", text))
    return outs


class GatewayE2eTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.on = Server()
        cls.off = Server("--cache=off")

    @classmethod
    def tearDownClass(cls):
        # A clean exit also means the sanitizers found nothing in the server process.
        codes = (cls.on.stop(), cls.off.stop())
        assert codes == (0, 0), "strata serve exit codes %s" % (codes,)

    def test_later_turns_compute_exactly_the_new_tokens(self):
        outs = three_turns(self.on, "py-three")
        self.assertEqual(outs[0][2].usage.cached_tokens, 0)
        self.assertEqual(outs[0][2].cache_tier, chat_pb2.TIER_NONE)
        for t in (1, 2):
            usage, prev = outs[t][2].usage, outs[t - 1][2].usage
            known = prev.prompt_tokens + prev.completion_tokens - 1
            self.assertEqual(usage.cached_tokens, known, "turn %d" % (t + 1))
            self.assertEqual(usage.computed_tokens, usage.prompt_tokens - known)
            self.assertEqual(outs[t][2].cache_tier, chat_pb2.TIER_HBM)

    def test_cache_on_equals_cache_off(self):
        on = three_turns(self.on, "py-equal")
        off = three_turns(self.off, "py-equal")
        for t in range(3):
            self.assertEqual(on[t][0], off[t][0], "turn %d differs with the cache on" % (t + 1))

    def test_chat_session_stream_answers_as_chat_calls(self):
        # A gateway's stream per session: each request written is a turn, answered (deltas,
        # then done) before the next is read; the same answers as Chat, the cache reused.
        requests = queue.Queue()
        events = self.on.chat.ChatSession(iter(requests.get, None), timeout=180)
        conv, dones = [], []
        for user in USER_TURNS:
            conv.append(("user", user))
            requests.put(chat_pb2.ChatRequest(session_id="py-stream", max_new_tokens=16,
                                              messages=[chat_pb2.Message(role=r, content=c) for r, c in conv]))
            tokens, text = [], ""
            for event in events:
                if event.HasField("delta"):
                    tokens.extend(event.delta.token_ids)
                    text += event.delta.text
                if event.HasField("done"):
                    dones.append(event.done)
                    break
            self.assertEqual(len(dones), len(conv) // 2 + 1, "a turn ended without its done event")
            ref_tokens, _, _ = turn(self.off, "py-stream", conv)
            self.assertEqual(tokens, ref_tokens, "turn %d on the stream differs" % len(dones))
            conv.append(("assistant", text))
        requests.put(None)  # the half-close
        self.assertEqual(list(events), [])
        self.assertEqual(events.code(), grpc.StatusCode.OK)
        for t in (1, 2):
            prev = dones[t - 1].usage
            self.assertEqual(dones[t].usage.cached_tokens, prev.prompt_tokens + prev.completion_tokens - 1)
            self.assertEqual(dones[t].cache_tier, chat_pb2.TIER_HBM)
        # A request that does not parse ends a stream with INVALID_ARGUMENT.
        raw = self.on.channel.stream_stream("/strata.v1.ChatService/ChatSession",
                                            request_serializer=lambda b: b, response_deserializer=lambda b: b)
        with self.assertRaises(grpc.RpcError) as err:
            list(raw(iter([b"\xff\xff\xff\xff"]), timeout=60))
        self.assertEqual(err.exception.code(), grpc.StatusCode.INVALID_ARGUMENT)

    def test_edited_history_reuses_unchanged_prefix(self):
        _, first_text, _ = turn(self.on, "py-edit", [("user", "I live in Paris and love jazz.")])
        edited = [("user", "I live in Oslo and love jazz."), ("assistant", first_text), ("user", "Ok?")]
        tokens, _, done = turn(self.on, "py-edit", edited)
        ref_tokens, _, _ = turn(self.off, "py-edit", edited)
        self.assertEqual(done.usage.cached_tokens, 2 + len("I live in "))
        self.assertEqual(tokens, ref_tokens)

    def test_metrics_show_reuse(self):
        three_turns(self.on, "py-metrics")
        m = self.on.metrics()
        self.assertGreater(m['strata_prefill_tokens_total{source="reused"}'], 0)
        self.assertGreaterEqual(m['strata_cache_hits_total{tier="hbm"}'], 2)
        self.assertGreaterEqual(m['strata_requests_total{code="ok",method="strata.v1.ChatService/Chat"}'], 3)

    def test_bad_input_gets_invalid_argument_and_changes_nothing(self):
        turn(self.on, "py-victim", [("user", "keep me")], max_new=4)
        before = self.on.cache.GetSession(cache_pb2.GetSessionRequest(session_id="py-victim"))
        bad = [
            chat_pb2.ChatRequest(session_id="", max_new_tokens=4,
                                 messages=[chat_pb2.Message(role="user", content="x")]),
            chat_pb2.ChatRequest(session_id="py-victim", max_new_tokens=4),
            chat_pb2.ChatRequest(session_id="py-victim", max_new_tokens=4,
                                 messages=[chat_pb2.Message(role="robot", content="x")]),
            chat_pb2.ChatRequest(session_id="py-victim", max_new_tokens=0,
                                 messages=[chat_pb2.Message(role="user", content="keep me")]),
        ]
        for req in bad:
            with self.assertRaises(grpc.RpcError) as ctx:
                list(self.on.chat.Chat(req, timeout=30))
            self.assertEqual(ctx.exception.code(), grpc.StatusCode.INVALID_ARGUMENT)
            self.assertTrue(ctx.exception.details())
        # Invalid UTF-8 cannot be built with the stub: send raw bytes as a gateway bug would.
        raw = self.on.channel.unary_stream("/strata.v1.ChatService/Chat",
                                           request_serializer=lambda b: b,
                                           response_deserializer=lambda b: b)
        wire = chat_pb2.ChatRequest(session_id="py-victim", max_new_tokens=4, messages=[
            chat_pb2.Message(role="user", content="PLACEHOLDER")]).SerializeToString()
        with self.assertRaises(grpc.RpcError) as ctx:
            list(raw(wire.replace(b"PLACEHOLDER", b"\xff\xfe\xfdinvalid"), timeout=30))
        self.assertEqual(ctx.exception.code(), grpc.StatusCode.INVALID_ARGUMENT)
        after = self.on.cache.GetSession(cache_pb2.GetSessionRequest(session_id="py-victim"))
        self.assertEqual(before.cached_tokens, after.cached_tokens)
        self.assertEqual(before.last_access_unix_ms, after.last_access_unix_ms)

    def test_health_service_is_serving(self):
        # grpc.health.v1 without grpcio-health-checking: call it with hand-encoded bytes.
        check = self.on.channel.unary_unary("/grpc.health.v1.Health/Check",
                                            request_serializer=lambda b: b,
                                            response_deserializer=lambda b: b)
        self.assertEqual(check(b"", timeout=10), b"\x08\x01")  # status: SERVING


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--strata", required=True)
    parser.add_argument("--stubs", required=True)
    ARGS, rest = parser.parse_known_args()
    load_stubs(ARGS.stubs)
    unittest.main(argv=[sys.argv[0]] + rest, verbosity=2)
