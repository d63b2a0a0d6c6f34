"""Offline batches through strata's BatchService: many prompts at once, planned as a whole
(prompts that share a prefix — a system prompt, a document — have it computed once).

    from strata.batch import Batch
    batch = Batch("127.0.0.1:7070", api_key="...")
    prompts = [{"id": "q1", "messages": [("system", doc), ("user", "Who?")]},
               {"id": "q2", "messages": [("system", doc), ("user", "Where?")], "max_new_tokens": 64}]
    for result in batch.run(prompts):          # as each prompt finishes
        print(result.id, result.error.message if result.HasField("error") else result.text)
    print(batch.plan.token_saving_ratio, batch.summary.completed)

A prompt is a dict: "id" (unique in the batch), "messages" (a list of (role, content) or of
{"role": ..., "content": ...}) or "token_ids", and optionally "max_new_tokens", "stop",
"temperature", "top_p", "seed". A prompt that fails comes back with `error` set (a gRPC
code and message) and the batch goes on; a call that fails raises TurnError.
"""
import grpc

from strata.client import TurnError
from strata.v1 import batch_pb2, batch_pb2_grpc

_PLANNING = {"global": batch_pb2.BATCH_PLANNING_GLOBAL, "first_level": batch_pb2.BATCH_PLANNING_FIRST_LEVEL,
             "none": batch_pb2.BATCH_PLANNING_NONE}


def _prompt(p):
    out = batch_pb2.BatchPrompt(id=str(p["id"]))
    for m in p.get("messages", []):
        role, content = (m["role"], m["content"]) if isinstance(m, dict) else m
        out.messages.add(role=role, content=content)
    out.token_ids.extend(p.get("token_ids", []))
    out.max_new_tokens = p.get("max_new_tokens", 0)
    out.stop.extend(p.get("stop", []))
    for k in ("temperature", "top_p", "seed"):
        if k in p:
            setattr(out.sampling, k, p[k])
    unknown = set(p) - {"id", "messages", "token_ids", "max_new_tokens", "stop", "temperature", "top_p", "seed"}
    if unknown:
        raise ValueError("unknown keys in prompt %r: %s" % (p.get("id"), ", ".join(sorted(unknown))))
    return out


class Batch:
    def __init__(self, target, api_key=None, planning="global", credentials=None, channel=None, timeout_s=None):
        """`target` is host:port; `planning` "global" (the default), "first_level" or "none";
        `credentials` a grpc.ChannelCredentials for TLS (None: plaintext)."""
        if planning not in _PLANNING:
            raise ValueError("planning is one of %s" % ", ".join(_PLANNING))
        if channel is None:
            channel = (grpc.secure_channel(target, credentials) if credentials is not None
                       else grpc.insecure_channel(target))
        self._stub = batch_pb2_grpc.BatchServiceStub(channel)
        self.api_key = api_key
        self.planning = planning
        self.timeout_s = timeout_s
        self.plan = None     # BatchPlanInfo, once the server planned the batch
        self.summary = None  # BatchSummary, at the end

    def run(self, prompts):
        """Sends `prompts` as one batch and yields a BatchResult per prompt as it finishes."""
        requests = [batch_pb2.BatchRequest(options=batch_pb2.BatchOptions(planning=_PLANNING[self.planning]))]
        requests += [batch_pb2.BatchRequest(prompt=_prompt(p)) for p in prompts]
        metadata = [("authorization", "Bearer " + self.api_key)] if self.api_key else []
        try:
            for event in self._stub.BatchGenerate(iter(requests), metadata=metadata, timeout=self.timeout_s):
                if event.HasField("plan"):
                    self.plan = event.plan
                elif event.HasField("result"):
                    yield event.result
                elif event.HasField("summary"):
                    self.summary = event.summary
        except grpc.RpcError as e:
            raise TurnError(e.code(), e.details()) from None
