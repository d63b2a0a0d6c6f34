#include "server/bench/runner.h"

#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <memory>
#include <queue>
#include <thread>

#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "server/session_header.h"
#include "strata/v1/chat.grpc.pb.h"

namespace strata::server::bench {
namespace {

struct Due {
  double at_ms;
  int session;
  bool operator>(const Due& o) const { return at_ms != o.at_ms ? at_ms > o.at_ms : session > o.session; }
};

class Runner {
 public:
  Runner(const Workload& workload, const RunnerOptions& options)
      : workload_(workload), options_(options), histories_(workload.sessions.size()),
        streams_(workload.sessions.size()),
        next_turn_(workload.sessions.size(), 0), total_(workload.TotalTurns()) {
    Connect();
    for (size_t s = 0; s < workload.sessions.size(); ++s) {
      const WorkloadSession& session = workload.sessions[s];
      if (session.turns.empty()) continue;
      if (session.system_prompt >= 0) histories_[s] = workload.system_prompts[session.system_prompt];
      due_.push(Due{session.turns[0].arrival_ms, static_cast<int>(s)});
      ++round_pending_;
    }
  }

  RunResult Run() {
    WaitForConnections();
    start_ = absl::Now();
    std::vector<std::thread> workers;
    for (int i = 0; i < options_.client_threads; ++i) workers.emplace_back([this] { Work(); });
    for (std::thread& t : workers) t.join();
    for (SessionStream& s : streams_) s.Close();  // none is left open but by a bug
    RunResult result;
    result.turns = std::move(records_);
    result.not_sent_turns = not_sent_;
    result.wall_s = last_end_ms_ / 1000.0;
    return result;
  }

 private:
  double NowMs() const { return absl::ToDoubleMilliseconds(absl::Now() - start_); }

  // New connections to the target. Several, so that one HTTP/2 connection's flow control
  // does not shape the load. Only while no turn is in flight.
  void Connect() {
    for (SessionStream& s : streams_) s.Close();  // their server is gone
    channels_.clear();
    stubs_.clear();
    const int channels = std::min(options_.client_threads, 8);
    for (int i = 0; i < channels; ++i) {
      grpc::ChannelArguments args;
      args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
      args.SetMaxReceiveMessageSize(-1);
      args.SetMaxSendMessageSize(-1);
      channels_.push_back(grpc::CreateCustomChannel(options_.target, grpc::InsecureChannelCredentials(), args));
      stubs_.push_back(v1::ChatService::NewStub(channels_.back()));
    }
  }

  // Every connection up before turns go out: a turn sent on a channel still connecting
  // fails at once (gRPC fails fast on a first connect attempt that did not take), which
  // is not what a run measures. A server that never answers is left to the turns to report.
  void WaitForConnections() {
    const absl::Time deadline = absl::Now() + std::min(options_.request_timeout, absl::Seconds(30));
    for (const std::shared_ptr<grpc::Channel>& channel : channels_) {
      channel->WaitForConnected(absl::ToChronoTime(deadline));
    }
  }

  void Work() {
    absl::MutexLock lock(&mu_);
    for (;;) {
      if (done_ + not_sent_ >= total_) {
        cv_.SignalAll();
        return;
      }
      if (due_.empty()) {
        cv_.Wait(&mu_);
        continue;
      }
      const Due next = due_.top();
      const double now = NowMs();
      if (next.at_ms > now) {
        cv_.WaitWithTimeout(&mu_, absl::Milliseconds(next.at_ms - now));
        continue;
      }
      due_.pop();
      if (!due_.empty()) cv_.Signal();  // another turn may be due too
      const int turn = next_turn_[next.session]++;
      // A session keeps its connection, as behind a gateway's connection pool: its next
      // turn goes out on a connection already in use, not on whichever the worker holds.
      v1::ChatService::Stub* stub = stubs_[static_cast<size_t>(next.session) % stubs_.size()].get();
      mu_.Unlock();
      TurnRecord record = SendTurn(*stub, next.session, turn, next.at_ms);
      mu_.Lock();
      Finish(std::move(record));
    }
  }

  // Runs one turn; reads and updates histories_[session], which only the worker holding
  // the session's current turn touches (hand-offs go through mu_).
  TurnRecord SendTurn(v1::ChatService::Stub& stub, int session, int turn, double scheduled_ms) {
    const WorkloadSession& ws = workload_.sessions[session];
    const WorkloadTurn& wt = ws.turns[turn];
    std::vector<int32_t>& history = histories_[session];
    history.insert(history.end(), wt.new_tokens.begin(), wt.new_tokens.end());
    v1::ChatRequest request;
    request.set_session_id(options_.session_prefix + ws.session_id);
    request.mutable_token_ids()->Assign(history.begin(), history.end());
    request.set_max_new_tokens(static_cast<uint32_t>(wt.max_new_tokens));
    // The shared system prompt is named, so the server computes and stores it once.
    if (ws.system_prompt >= 0) {
      request.set_system_prefix_tokens(static_cast<uint32_t>(workload_.system_prompts[ws.system_prompt].size()));
    }

    TurnRecord r;
    r.session = session;
    r.turn = turn;
    r.measured = wt.measured;
    r.scheduled_ms = scheduled_ms;
    const absl::Time sent = absl::Now();
    r.sent_ms = absl::ToDoubleMilliseconds(sent - start_);
    Answer answer{sent};
    const grpc::Status status = options_.chat_stream ? StreamTurn(stub, session, turn, request, r, answer)
                                                     : CallTurn(stub, request, r, answer);
    r.e2e_ms = absl::ToDoubleMilliseconds(absl::Now() - sent);
    r.status_code = status.error_code();
    if (!status.ok()) {
      r.error = status.error_message();
      // The first failures say why on stderr (the report counts them all by code).
      if (failures_logged_.fetch_add(1) < 5) {
        std::fprintf(stderr, "strata bench: turn %d of session %d failed after %.0f ms: %s (code %d)\n", turn + 1,
                     session, r.e2e_ms, r.error.c_str(), static_cast<int>(r.status_code));
      }
      r.server_ttft_ms = -1;
      r.prompt_tokens = r.cached_tokens = r.computed_tokens = r.completion_tokens = 0;
      r.tier = 0;
    } else {
      history.insert(history.end(), answer.tokens.begin(), answer.tokens.end());
      r.answer_tokens = std::move(answer.tokens);
    }
    return r;
  }

  // A turn's answer as it arrives.
  struct Answer {
    absl::Time sent;
    absl::Time last;
    std::vector<int32_t> tokens;
    explicit Answer(absl::Time at) : sent(at), last(at) {}
  };

  // A session's ChatSession call (chat_stream), open from its first turn to its last.
  struct SessionStream {
    std::unique_ptr<grpc::ClientContext> context;
    std::unique_ptr<grpc::ClientReaderWriter<v1::ChatRequest, v1::ChatEvent>> stream;
    // The call's status; the stream is closed after it.
    grpc::Status Finish() {
      grpc::Status status = stream->Finish();
      stream.reset();
      context.reset();
      return status;
    }
    // Cancels an open call (its server is gone, or a bug left it open).
    void Close() {
      if (stream == nullptr) return;
      context->TryCancel();
      Finish();
    }
  };

  // The metadata and deadline of a call for session `session_id`.
  void SetUp(grpc::ClientContext& context, const std::string& session_id, absl::Duration timeout) const {
    if (!options_.api_key.empty()) context.AddMetadata("authorization", "Bearer " + options_.api_key);
    context.AddMetadata(kSessionHeader, session_id);  // for session-affine proxies
    context.set_deadline(absl::ToChronoTime(absl::Now() + timeout));
    // A server restarted between rounds: the call waits for the channel to reconnect.
    if (options_.server_restarts) context.set_wait_for_ready(true);
  }

  // Takes one event of the turn into `r` and `answer`; true for its last (`done`).
  static bool Take(const v1::ChatEvent& event, TurnRecord& r, Answer& answer) {
    if (event.has_delta() && event.delta().token_ids_size() > 0) {
      const absl::Time now = absl::Now();
      const int n = event.delta().token_ids_size();
      if (r.ttft_ms < 0) {
        r.ttft_ms = absl::ToDoubleMilliseconds(now - answer.sent);
        for (int i = 1; i < n; ++i) r.inter_token_ms.push_back(0);
      } else {
        // Tokens that arrive together share the gap since the previous delta.
        for (int i = 0; i < n; ++i) r.inter_token_ms.push_back(absl::ToDoubleMilliseconds(now - answer.last) / n);
      }
      answer.last = now;
      answer.tokens.insert(answer.tokens.end(), event.delta().token_ids().begin(), event.delta().token_ids().end());
    }
    if (!event.has_done()) return false;
    const v1::ChatDone& done = event.done();
    r.server_ttft_ms = done.ttft_ms();
    r.prompt_tokens = done.usage().prompt_tokens();
    r.cached_tokens = done.usage().cached_tokens();
    r.computed_tokens = done.usage().computed_tokens();
    r.completion_tokens = done.usage().completion_tokens();
    r.tier = done.cache_tier();
    return true;
  }

  grpc::Status CallTurn(v1::ChatService::Stub& stub, const v1::ChatRequest& request, TurnRecord& r, Answer& answer) {
    grpc::ClientContext context;
    SetUp(context, request.session_id(), options_.request_timeout);
    auto reader = stub.Chat(&context, request);
    v1::ChatEvent event;
    while (reader->Read(&event)) Take(event, r, answer);
    return reader->Finish();
  }

  // The turn on its session's stream (opened by its first turn, with a deadline that
  // covers the session's turns); the stream ends after the session's last turn, or with
  // a turn that failed (its status).
  grpc::Status StreamTurn(v1::ChatService::Stub& stub, int session, int turn, const v1::ChatRequest& request,
                          TurnRecord& r, Answer& answer) {
    const WorkloadSession& ws = workload_.sessions[session];
    SessionStream& s = streams_[session];
    if (s.stream == nullptr) {
      s.context = std::make_unique<grpc::ClientContext>();
      const double span_ms = std::max(0.0, ws.turns.back().arrival_ms - ws.turns[turn].arrival_ms);
      SetUp(*s.context, request.session_id(),
            options_.request_timeout * static_cast<double>(ws.turns.size() - turn) + absl::Milliseconds(span_ms));
      s.stream = stub.ChatSession(s.context.get());
    }
    bool done = false;
    if (s.stream->Write(request)) {
      v1::ChatEvent event;
      while (!done && s.stream->Read(&event)) done = Take(event, r, answer);
    }
    const bool last = static_cast<size_t>(turn) + 1 == ws.turns.size();
    if (done && !last) return grpc::Status::OK;
    if (done) s.stream->WritesDone();
    grpc::Status status = s.Finish();
    if (!done && status.ok()) {
      status = grpc::Status(grpc::StatusCode::INTERNAL, "the stream ended without the turn's done event");
    }
    return status;
  }

  void Finish(TurnRecord record) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    const int session = record.session;
    const WorkloadSession& ws = workload_.sessions[session];
    const bool failed = record.status_code != 0;
    last_end_ms_ = std::max(last_end_ms_, record.sent_ms + record.e2e_ms);
    records_.push_back(std::move(record));
    ++done_;
    const size_t next = static_cast<size_t>(next_turn_[session]);
    if (failed) {
      not_sent_ += static_cast<int64_t>(ws.turns.size() - next);
    } else if (next < ws.turns.size()) {
      if (workload_.turn_barrier) {
        waiting_.push_back(session);
      } else {
        due_.push(Due{std::max(ws.turns[next].arrival_ms, NowMs()), session});
      }
    }
    if (workload_.turn_barrier && --round_pending_ == 0) {
      if (options_.between_rounds && !waiting_.empty()) {
        std::vector<std::string> ids;
        for (int s : waiting_) ids.push_back(options_.session_prefix + workload_.sessions[s].session_id);
        options_.between_rounds(ids);
        // A restarted server: the old connections are gone (their GOAWAY may still be on its
        // way to a channel); the next round goes out on new ones.
        if (options_.server_restarts) {
          Connect();
          WaitForConnections();
        }
      }
      const double now = NowMs() + workload_.round_gap_ms;
      for (int s : waiting_) due_.push(Due{now, s});
      round_pending_ = static_cast<int64_t>(waiting_.size());
      waiting_.clear();
    }
    if (options_.on_progress) options_.on_progress(done_ + not_sent_, total_);
    cv_.SignalAll();
  }

  const Workload& workload_;
  const RunnerOptions& options_;
  // Made before the run and, after a server restart, again between rounds by the worker
  // that ended the round (holding mu_, nothing in flight); workers take a stub under mu_.
  std::vector<std::shared_ptr<grpc::Channel>> channels_;
  std::vector<std::unique_ptr<v1::ChatService::Stub>> stubs_;
  absl::Time start_;
  absl::Mutex mu_;
  absl::CondVar cv_;
  std::atomic<int> failures_logged_{0};
  // Per session: its prompt so far, and the index of its next turn; see SendTurn.
  std::vector<std::vector<int32_t>> histories_;
  std::vector<SessionStream> streams_;  // chat_stream: per session, like histories_
  std::vector<int> next_turn_ ABSL_GUARDED_BY(mu_);
  std::priority_queue<Due, std::vector<Due>, std::greater<Due>> due_ ABSL_GUARDED_BY(mu_);
  std::vector<int> waiting_ ABSL_GUARDED_BY(mu_);  // turn_barrier: sessions held for the next round
  int64_t round_pending_ ABSL_GUARDED_BY(mu_) = 0;  // turn_barrier: turns left in this round
  std::vector<TurnRecord> records_ ABSL_GUARDED_BY(mu_);
  int64_t done_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t not_sent_ ABSL_GUARDED_BY(mu_) = 0;
  double last_end_ms_ ABSL_GUARDED_BY(mu_) = 0;
  const int64_t total_;
};

}  // namespace

absl::StatusOr<RunResult> RunWorkload(const Workload& workload, const RunnerOptions& options) {
  if (options.target.empty()) return absl::InvalidArgumentError("no target to run against");
  if (options.client_threads < 1) return absl::InvalidArgumentError("client_threads must be >= 1");
  Runner runner(workload, options);
  return runner.Run();
}

}  // namespace strata::server::bench
