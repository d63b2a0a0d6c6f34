"""A conversation with strata, as a gateway holds it.

    from strata.client import Session
    s = Session("127.0.0.1:7070", "user-42", system="You are terse.")
    for piece in s.stream("Hello!"):
        print(piece, end="", flush=True)
    print(s.last.usage.cached_tokens, "tokens reused")

A Session keeps the conversation and resends it whole every turn, with the assistant's
answers exactly as strata streamed them (that is what lets strata reuse the session's KV:
an edited history is reused only up to the first changed token). It sends the session ID
as the `x-session-id` header, so a session-affine proxy (deploy/nginx) keeps the session
on one replica, and the API key as `authorization: Bearer`. A call waits (within
`timeout_s`) for a server that is starting or restarting; a turn refused with UNAVAILABLE
before any token arrived (a draining server) is retried with backoff; once tokens have
streamed, an error is raised (the turn is not replayed) and the conversation stays as it
was. One turn at a time per session: strata runs a session's turns in order.

With `stream_turns=True` the session's turns go on one `ChatSession` stream, opened by the
first turn and kept until `close()` (or the end of a `with` block): a turn then costs no
call set-up (0.3-0.5 ms on the H100 machine, docs/BENCHMARKS.md). `timeout_s` bounds each
turn (a turn past it cancels the stream; the next turn opens a new one), and an open stream
holds one of the server's gRPC threads, so close sessions that stop talking.
"""
import queue
import threading
import time

import grpc

from strata.v1 import chat_pb2, chat_pb2_grpc


class TurnError(Exception):
    """A turn that failed; `code` is the grpc.StatusCode."""

    def __init__(self, code, details):
        super().__init__("%s: %s" % (code.name, details))
        self.code = code
        self.details = details


class Session:
    def __init__(self, target, session_id, api_key=None, system=None, system_prompt_id=None,
                 credentials=None, max_new_tokens=256, retries=4, backoff_s=0.25, timeout_s=120.0,
                 channel=None, wait_for_ready=True, context_overflow=None, stream_turns=False):
        """`target` is host:port; `credentials` a grpc.ChannelCredentials for TLS (None:
        plaintext); `system` a system message, or `system_prompt_id` a registered prompt
        (SystemPromptService) in its place. `context_overflow`: "truncate" or "reject" for a
        conversation longer than the server's window (None: the server's default). The
        session keeps the whole conversation either way; a cut turn says how many tokens it
        dropped in `last.truncated_tokens`."""
        if context_overflow not in (None, "truncate", "reject"):
            raise ValueError("context_overflow is 'truncate', 'reject' or None")
        if system is not None and system_prompt_id is not None:
            raise ValueError("give system or system_prompt_id, not both")
        if channel is None:
            channel = (grpc.secure_channel(target, credentials) if credentials is not None
                       else grpc.insecure_channel(target))
        self._stub = chat_pb2_grpc.ChatServiceStub(channel)
        self.session_id = session_id
        self.api_key = api_key
        self.system_prompt_id = system_prompt_id
        self.max_new_tokens = max_new_tokens
        self.context_overflow = context_overflow
        self.retries = retries
        self.backoff_s = backoff_s
        self.timeout_s = timeout_s
        # A call waits (within timeout_s) for a server that is starting or restarting.
        self.wait_for_ready = wait_for_ready
        self.messages = [] if system is None else [("system", system)]
        self.last = None  # the last turn's ChatDone
        self.attempts = 0  # calls made for the last turn (1 without retries)
        self.stream_turns = stream_turns
        self._open = None  # the ChatSession stream (its request queue and call), when open

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def close(self):
        """Ends the session's ChatSession stream, if one is open (half-close: the server ends
        it with OK); within 5 s, or it is cancelled."""
        if self._open is None:
            return
        requests, call = self._open
        self._open = None
        requests.put(None)
        timer = threading.Timer(5.0, call.cancel)
        timer.start()
        try:
            for _ in call:
                pass
        except grpc.RpcError:
            pass
        finally:
            timer.cancel()

    def _drop_stream(self):
        if self._open is not None:
            self._open[0].put(None)
            self._open[1].cancel()
            self._open = None

    def _events(self, request):
        """The events of one turn: a Chat call's, or the turn's on the session's stream."""
        if not self.stream_turns:
            yield from self._stub.Chat(request, metadata=self._metadata(), timeout=self.timeout_s,
                                       wait_for_ready=self.wait_for_ready)
            return
        if self._open is None:
            requests = queue.Queue()

            def sent():
                while True:
                    r = requests.get()
                    if r is None:
                        return
                    yield r
            self._open = (requests, self._stub.ChatSession(sent(), metadata=self._metadata(),
                                                           wait_for_ready=self.wait_for_ready))
        requests, call = self._open
        expired = threading.Event()

        def expire():
            expired.set()
            call.cancel()
        timer = threading.Timer(self.timeout_s, expire)
        requests.put(request)
        timer.start()
        try:
            for event in call:
                yield event
                if event.HasField("done"):
                    return
            raise TurnError(grpc.StatusCode.UNAVAILABLE, "the stream ended before the turn's answer")
        except grpc.RpcError as e:
            if expired.is_set():
                raise TurnError(grpc.StatusCode.DEADLINE_EXCEEDED,
                                "the turn took longer than timeout_s (%g s)" % self.timeout_s) from None
            raise
        finally:
            timer.cancel()
            # A timer that fired after the turn's done cancelled a healthy stream: drop it.
            if expired.is_set() and self._open is not None and self._open[1] is call:
                self._drop_stream()

    def _metadata(self):
        md = [("x-session-id", self.session_id)]
        if self.api_key:
            md.append(("authorization", "Bearer " + self.api_key))
        return md

    def _request(self, sampling):
        r = chat_pb2.ChatRequest(session_id=self.session_id, max_new_tokens=self.max_new_tokens)
        for role, content in self.messages:
            r.messages.add(role=role, content=content)
        if self.system_prompt_id:
            r.system_prompt_id = self.system_prompt_id
        if self.context_overflow == "truncate":
            r.context_overflow = chat_pb2.CONTEXT_OVERFLOW_TRUNCATE
        elif self.context_overflow == "reject":
            r.context_overflow = chat_pb2.CONTEXT_OVERFLOW_REJECT
        for k, v in sampling.items():
            setattr(r.sampling, k, v)
        return r

    def stream(self, text, **sampling):
        """Sends `text` as the next user message and yields the answer's text as it streams.
        The answer joins the conversation once the turn is done; `last` holds its ChatDone
        (usage, cache tier, TTFT). Raises TurnError."""
        self.messages.append(("user", text))
        request = self._request(sampling)
        answer = []
        for attempt in range(self.retries + 1):
            self.attempts = attempt + 1
            started = False
            try:
                for event in self._events(request):
                    if event.HasField("delta"):
                        started = True
                        answer.append(event.delta.text)
                        if event.delta.text:
                            yield event.delta.text
                    elif event.HasField("done"):
                        self.last = event.done
                self.messages.append(("assistant", "".join(answer)))
                return
            except (grpc.RpcError, TurnError) as e:
                # A failed turn ends the session's stream: the next one opens another.
                self._drop_stream()
                code, details = (e.code, e.details) if isinstance(e, TurnError) else (e.code(), e.details())
                retry = code == grpc.StatusCode.UNAVAILABLE and not started and attempt < self.retries
                if not retry:
                    self.messages.pop()  # the turn did not happen: the conversation is as before
                    raise TurnError(code, details) from None
                time.sleep(self.backoff_s * (2 ** attempt))

    def send(self, text, **sampling):
        """Like stream(), returning the whole answer."""
        return "".join(self.stream(text, **sampling))
