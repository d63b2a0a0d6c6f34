#include "storage/sim/placement_sim.h"

#include <algorithm>
#include <cmath>
#include <deque>
#include <queue>
#include <tuple>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_format.h"

namespace strata::storage {
namespace {

struct SimSession {
  int64_t tokens = 0;       // tokens whose KV is stored
  int64_t host_blocks = 0;  // blocks held on host (including a prefetch in transit)
  bool on_host = false;     // the host copy is complete and usable
  int64_t ssd_blocks = 0;   // blocks held on SSD
  bool persisted = false;   // the SSD copy holds exactly `tokens`
  uint64_t last_use = 0;
  uint64_t inserted = 0;
  bool prefetching = false;
  double prefetch_done_ms = 0;
  uint64_t generation = 0;  // bumped by every save or removal; stale prefetches are ignored
  bool prefetched_unused = false;
  bool running = false;
};

enum class EventType { kPrefetchDone = 0, kFinish = 1, kHint = 2, kArrival = 3 };

struct Event {
  double time_ms;
  EventType type;
  uint64_t seq;
  size_t request = 0;     // arrival / finish
  std::string session;    // prefetch done
  uint64_t generation = 0;
  bool operator>(const Event& o) const {
    return std::tie(time_ms, type, seq) > std::tie(o.time_ms, o.type, o.seq);
  }
};

class Simulator {
 public:
  Simulator(const Trace& trace, const SimOptions& options)
      : trace_(trace), o_(options), placement_(options.policy) {
    result_.policy = PlacementPolicyName(options.policy);
    result_.outcomes.resize(trace.requests.size());
    for (size_t i = 0; i < trace.requests.size(); ++i) upcoming_[trace.requests[i].session_id].push_back(i);
    if (options.policy == PlacementPolicy::kBelady) {
      placement_.SetOracle([this](absl::string_view key) -> uint64_t {
        auto it = upcoming_.find(key);
        if (it == upcoming_.end() || it->second.empty()) return kNeverUsedAgain;
        return static_cast<uint64_t>(trace_.requests[it->second.front()].arrival_ms * 1000.0);
      });
    }
  }

  SimResult Run() {
    if (o_.sequential) {
      double now = 0;
      for (size_t i = 0; i < trace_.requests.size(); ++i) {
        arrival_ms_.push_back(now);
        now = Admit(i, now);
        Finish(i);
      }
    } else {
      for (size_t i = 0; i < trace_.requests.size(); ++i) {
        arrival_ms_.push_back(trace_.requests[i].arrival_ms);
        Push(Event{trace_.requests[i].arrival_ms, EventType::kArrival, 0, i});
        if (o_.hint_lead_ms > 0 && trace_.requests[i].reusable_tokens > 0) {
          Push(Event{std::max(0.0, trace_.requests[i].arrival_ms - o_.hint_lead_ms), EventType::kHint, 0, i});
        }
      }
      while (!events_.empty()) {
        Event e = events_.top();
        events_.pop();
        now_ = e.time_ms;
        switch (e.type) {
          case EventType::kArrival:
            queue_.push_back(e.request);
            break;
          case EventType::kFinish:
            --running_;
            Finish(e.request);
            break;
          case EventType::kPrefetchDone:
            PrefetchDone(e.session, e.generation);
            break;
          case EventType::kHint:
            if (sessions_.contains(trace_.requests[e.request].session_id)) {
              placement_.Hint(trace_.requests[e.request].session_id);
            }
            break;
        }
        AdmitWaiting();
        Prefetch();
      }
    }
    Summarise();
    return std::move(result_);
  }

 private:
  int64_t Blocks(int64_t tokens) const { return (tokens + o_.block_tokens - 1) / o_.block_tokens; }
  double BlockBytes() const { return static_cast<double>(o_.block_tokens * o_.kv_bytes_per_token); }
  int64_t HostFree() const { return o_.host_blocks - host_used_; }
  int64_t SsdFree() const { return o_.ssd_blocks - ssd_used_; }
  void Push(Event e) {
    e.seq = ++seq_;
    events_.push(std::move(e));
  }

  void AdmitWaiting() {
    for (auto it = queue_.begin(); it != queue_.end() && running_ < o_.slots;) {
      const std::string& id = trace_.requests[*it].session_id;
      auto s = sessions_.find(id);
      if (s != sessions_.end() && s->second.running) {
        ++it;  // its previous turn is still running
        continue;
      }
      const size_t r = *it;
      it = queue_.erase(it);
      ++running_;
      const double finish = Admit(r, now_);
      Push(Event{finish, EventType::kFinish, 0, r});
    }
    std::vector<std::string> keys;
    keys.reserve(queue_.size());
    for (size_t r : queue_) keys.push_back(trace_.requests[r].session_id);
    placement_.SetQueue(keys);
  }

  // Starts request r at `now`; returns when it finishes.
  double Admit(size_t r, double now) {
    const TraceRequest& req = trace_.requests[r];
    SimRequestOutcome& out = result_.outcomes[r];
    auto& up = upcoming_[req.session_id];
    if (!up.empty() && up.front() == r) up.pop_front();
    placement_.Used(req.session_id);
    auto it = sessions_.find(req.session_id);
    SimSession* s = it == sessions_.end() ? nullptr : &it->second;
    int64_t reusable = 0;
    if (s != nullptr) {
      reusable = std::min({req.reusable_tokens, s->tokens, req.context_tokens - 1});
      s->running = true;
      s->last_use = ++clock_;
    }
    double load_ms = 0;
    if (reusable > 0) {
      const double bytes = static_cast<double>(Blocks(s->tokens)) * BlockBytes();
      if (s->on_host) {
        out.found = SimTier::kHost;
        if (s->prefetched_unused) ++result_.prefetch_in_time;
        s->prefetched_unused = false;
        load_ms = bytes / o_.host_to_gpu_bytes_per_s * 1e3;
      } else if (s->prefetching) {
        // The prefetch is still on its way: the turn waits for it.
        out.found = SimTier::kSsd;
        ++result_.prefetch_late;
        load_ms = std::max(0.0, s->prefetch_done_ms - now) + bytes / o_.host_to_gpu_bytes_per_s * 1e3;
        s->prefetching = false;
        s->on_host = true;
        result_.bytes_ssd_to_host += static_cast<int64_t>(bytes);
      } else {
        out.found = SimTier::kSsd;
        const double start = std::max(now, ssd_free_at_ms_);
        const double fetch_ms = start - now + bytes / o_.ssd_read_bytes_per_s * 1e3;
        const double recompute_ms = static_cast<double>(reusable) / o_.prefill_tokens_per_s * 1e3;
        if (o_.fetch_or_recompute && recompute_ms < fetch_ms) {
          out.recomputed = true;
          reusable = 0;
        } else if (!MakeHostRoom(Blocks(s->tokens), req.session_id, RoomFor::kHost)) {
          reusable = 0;  // no room to bring it up: computed from scratch
        } else {
          ssd_free_at_ms_ = start + bytes / o_.ssd_read_bytes_per_s * 1e3;
          load_ms = fetch_ms + bytes / o_.host_to_gpu_bytes_per_s * 1e3;
          s->host_blocks = Blocks(s->tokens);
          host_used_ += s->host_blocks;
          s->on_host = true;
          result_.bytes_ssd_to_host += static_cast<int64_t>(bytes);
        }
      }
    } else if (req.reusable_tokens > 0) {
      out.found = SimTier::kNone;
    }
    out.reused_tokens = reusable;
    const double prefill_ms = static_cast<double>(req.context_tokens - reusable) / o_.prefill_tokens_per_s * 1e3;
    out.queue_ms = now - arrival_ms_[r];
    out.ttft_ms = out.queue_ms + load_ms + prefill_ms;
    return now + load_ms + prefill_ms + static_cast<double>(req.output_tokens) * o_.decode_ms_per_token;
  }

  // The turn's end: the session is saved to host, then written back to SSD.
  void Finish(size_t r) {
    const TraceRequest& req = trace_.requests[r];
    const int64_t reused = result_.outcomes[r].reused_tokens;
    SimSession& s = sessions_[req.session_id];
    if (s.inserted == 0) s.inserted = ++clock_;
    s.running = false;
    const int64_t tokens = std::max<int64_t>(1, req.context_tokens + req.output_tokens - 1);
    const int64_t chunks = Blocks(tokens);
    if (s.prefetching) {  // a prefetch of the old version is overtaken by this save
      s.prefetching = false;
      s.on_host = false;
    }
    const int64_t keep = s.on_host ? std::min(reused / o_.block_tokens, s.host_blocks) : 0;
    host_used_ -= s.host_blocks - keep;
    s.host_blocks = keep;
    ++s.generation;
    s.prefetched_unused = false;
    if (!MakeHostRoom(chunks - keep, req.session_id, RoomFor::kHost)) {
      Remove(req.session_id);
      return;
    }
    host_used_ += chunks - keep;
    s.host_blocks = chunks;
    s.on_host = true;
    s.tokens = tokens;
    s.persisted = false;
    s.last_use = ++clock_;
    // Write-back: the new copy needs room while the old one is still held.
    if (SsdFree() < chunks) MakeSsdRoom(chunks, req.session_id);
    if (SsdFree() >= chunks) {
      ssd_used_ += chunks - s.ssd_blocks;
      s.ssd_blocks = chunks;
      s.persisted = true;
      result_.bytes_host_to_ssd += static_cast<int64_t>(static_cast<double>(chunks) * BlockBytes());
    }
  }

  void PrefetchDone(const std::string& id, uint64_t generation) {
    auto it = sessions_.find(id);
    if (it == sessions_.end() || !it->second.prefetching || it->second.generation != generation) return;
    SimSession& s = it->second;
    s.prefetching = false;
    s.on_host = true;
    s.prefetched_unused = true;
    result_.bytes_ssd_to_host += static_cast<int64_t>(static_cast<double>(s.host_blocks) * BlockBytes());
  }

  void Prefetch() {
    if (o_.policy != PlacementPolicy::kSchedulerAware || sessions_.empty()) return;
    int64_t stored_blocks = 0;
    // Host room a prefetch may use: free blocks, and blocks of host copies outside the
    // look-ahead that are also on SSD (demoting them loses nothing).
    int64_t prefetch_room = HostFree();
    for (const auto& [id, s] : sessions_) {
      stored_blocks += Blocks(s.tokens);
      if (s.host_blocks > 0 && s.persisted && !s.prefetching && !placement_.InLookAhead(id)) {
        prefetch_room += s.host_blocks;
      }
    }
    placement_.SetCapacity(prefetch_room, o_.host_blocks, o_.ssd_blocks,
                           static_cast<double>(stored_blocks) / static_cast<double>(sessions_.size()));
    auto needs_fetch = [this](const std::string& id) {
      auto it = sessions_.find(id);
      return it != sessions_.end() && !it->second.on_host && !it->second.prefetching && it->second.persisted &&
             !it->second.running;
    };
    for (const std::string& id : placement_.PrefetchOrder(needs_fetch)) {
      SimSession& s = sessions_[id];
      const int64_t blocks = Blocks(s.tokens);
      if (!MakeHostRoom(blocks, id, RoomFor::kHostPrefetch)) break;  // the rest are farther back
      host_used_ += blocks;
      s.host_blocks = blocks;
      s.prefetching = true;
      const double start = std::max(now_, ssd_free_at_ms_);
      s.prefetch_done_ms = start + static_cast<double>(blocks) * BlockBytes() / o_.ssd_read_bytes_per_s * 1e3;
      ssd_free_at_ms_ = s.prefetch_done_ms;
      Push(Event{s.prefetch_done_ms, EventType::kPrefetchDone, 0, 0, id, s.generation});
    }
  }

  // Demotes or evicts host copies (policy order) until `blocks` are free.
  bool MakeHostRoom(int64_t blocks, const std::string& keep, RoomFor purpose) {
    if (HostFree() >= blocks) return true;
    std::vector<PlacementCandidate> candidates;
    for (const auto& [id, s] : sessions_) {
      if (id == keep || s.host_blocks == 0 || s.prefetching) continue;
      candidates.push_back({id, s.last_use, s.inserted});
    }
    placement_.OrderVictims(candidates, purpose);
    std::vector<std::string> victims;
    for (const PlacementCandidate& c : candidates) {
      // A prefetch only demotes (copies that stay on SSD); it never makes anything a miss.
      if (purpose == RoomFor::kHostPrefetch && !sessions_.at(c.key).persisted) continue;
      victims.emplace_back(c.key);
    }
    if (purpose == RoomFor::kHostPrefetch) {
      int64_t could_free = HostFree();
      for (const std::string& id : victims) could_free += sessions_.at(id).host_blocks;
      if (could_free < blocks) return false;  // all or nothing
    }
    for (const std::string& id : victims) {
      if (HostFree() >= blocks) break;
      SimSession& v = sessions_[id];
      if (v.persisted) {
        host_used_ -= v.host_blocks;
        v.host_blocks = 0;
        v.on_host = false;
        if (v.prefetched_unused) ++result_.prefetch_wasted;
        v.prefetched_unused = false;
        ++result_.demotions;
      } else if (placement_.MayLeaveStore(id)) {
        Remove(id);
        ++result_.evictions;
      }
    }
    return HostFree() >= blocks;
  }

  // Evicts sessions held only on SSD (policy order) until `blocks` SSD blocks are free.
  void MakeSsdRoom(int64_t blocks, const std::string& keep) {
    std::vector<PlacementCandidate> candidates;
    for (const auto& [id, s] : sessions_) {
      if (id == keep || s.host_blocks > 0 || !s.persisted || s.running) continue;
      candidates.push_back({id, s.last_use, s.inserted});
    }
    placement_.OrderVictims(candidates, RoomFor::kLeaveStore);
    std::vector<std::string> victims;
    for (const PlacementCandidate& c : candidates) victims.emplace_back(c.key);
    for (const std::string& id : victims) {
      if (SsdFree() >= blocks) break;
      Remove(id);
      ++result_.evictions;
    }
  }

  void Remove(const std::string& id) {
    auto it = sessions_.find(id);
    if (it == sessions_.end()) return;
    host_used_ -= it->second.host_blocks;
    ssd_used_ -= it->second.ssd_blocks;
    if (it->second.prefetched_unused) ++result_.prefetch_wasted;
    sessions_.erase(it);
  }

  void Summarise() {
    std::vector<double> ttft;
    for (size_t i = 0; i < trace_.requests.size(); ++i) {
      const SimRequestOutcome& out = result_.outcomes[i];
      ++result_.requests;
      ttft.push_back(out.ttft_ms);
      if (trace_.requests[i].reusable_tokens <= 0) continue;
      ++result_.reusable_requests;
      if (out.recomputed) ++result_.recomputed;
      switch (out.found) {
        case SimTier::kHost:
          ++result_.hits_host;
          break;
        case SimTier::kSsd:
          ++result_.hits_ssd;
          break;
        case SimTier::kNone:
          ++result_.misses;
          break;
      }
    }
    if (ttft.empty()) return;
    double sum = 0;
    for (double t : ttft) sum += t;
    result_.ttft_mean_ms = sum / static_cast<double>(ttft.size());
    std::sort(ttft.begin(), ttft.end());
    auto pct = [&](double p) {
      return ttft[std::min(ttft.size() - 1, static_cast<size_t>(p * static_cast<double>(ttft.size())))];
    };
    result_.ttft_p50_ms = pct(0.5);
    result_.ttft_p99_ms = pct(0.99);
  }

  const Trace& trace_;
  const SimOptions o_;
  Placement placement_;
  SimResult result_;
  absl::flat_hash_map<std::string, SimSession> sessions_;
  absl::flat_hash_map<std::string, std::deque<size_t>> upcoming_;  // requests not yet admitted, per session
  std::vector<double> arrival_ms_;
  std::priority_queue<Event, std::vector<Event>, std::greater<>> events_;
  std::deque<size_t> queue_;  // arrived, not admitted
  int running_ = 0;
  double now_ = 0;
  double ssd_free_at_ms_ = 0;  // the modelled SSD channel is busy until then
  int64_t host_used_ = 0;
  int64_t ssd_used_ = 0;
  uint64_t clock_ = 0;
  uint64_t seq_ = 0;
};

}  // namespace

SimResult Simulate(const Trace& trace, const SimOptions& options) { return Simulator(trace, options).Run(); }

int64_t WorkingSetBlocks(const Trace& trace, int64_t block_tokens) {
  absl::flat_hash_map<std::string, int64_t> largest;
  for (const TraceRequest& r : trace.requests) {
    int64_t& t = largest[r.session_id];
    t = std::max(t, r.context_tokens + r.output_tokens - 1);
  }
  int64_t blocks = 0;
  for (const auto& [id, tokens] : largest) blocks += (tokens + block_tokens - 1) / block_tokens;
  return blocks;
}

std::string ComparePolicies(const Trace& trace, const SimOptions& base, const std::vector<CapacityPoint>& points) {
  const int64_t working_set = WorkingSetBlocks(trace, base.block_tokens);
  std::string out = absl::StrFormat(
      "%d requests, %d sessions, working set %d blocks (%.1f GB)\n\n"
      "| host | SSD | policy | hit rate | host hits | SSD hits | from host | GB SSD→host | GB host→SSD | "
      "prefetch in time / late / wasted | recomputed | TTFT mean ms | p50 ms | p99 ms |\n"
      "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n",
      trace.requests.size(), trace.sessions, working_set,
      static_cast<double>(working_set * base.block_tokens * base.kv_bytes_per_token) / 1e9);
  for (const CapacityPoint& point : points) {
    for (PlacementPolicy policy : {PlacementPolicy::kSchedulerAware, PlacementPolicy::kLru, PlacementPolicy::kFifo,
                                   PlacementPolicy::kBelady}) {
      SimOptions o = base;
      o.policy = policy;
      o.host_blocks = static_cast<int64_t>(point.host_fraction * static_cast<double>(working_set));
      o.ssd_blocks = static_cast<int64_t>(point.ssd_fraction * static_cast<double>(working_set));
      const SimResult r = Simulate(trace, o);
      absl::StrAppendFormat(&out, "| %.0f%% | %.0f%% | %s | %.1f%% | %d | %d | %.1f%% | %.1f | %.1f | %d / %d / %d | %d | %.0f | %.0f | %.0f |\n",
                            point.host_fraction * 100, point.ssd_fraction * 100, r.policy, r.hit_rate() * 100,
                            r.hits_host, r.hits_ssd, r.host_share() * 100,
                            static_cast<double>(r.bytes_ssd_to_host) / 1e9,
                            static_cast<double>(r.bytes_host_to_ssd) / 1e9, r.prefetch_in_time, r.prefetch_late,
                            r.prefetch_wasted, r.recomputed, r.ttft_mean_ms, r.ttft_p50_ms, r.ttft_p99_ms);
    }
  }
  return out;
}

}  // namespace strata::storage
