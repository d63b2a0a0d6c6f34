#include "model/cuda/step_plan.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "model/cuda/device_memory.h"

namespace strata::model::cuda_internal {

StepMeta MetaLayout(int64_t rows, int n_seq, int64_t logit_rows, int64_t pages, int groups, int64_t relay_pages) {
  Arena a;
  StepMeta m{};
  m.ids = a.Add(4 * rows);
  m.positions = a.Add(4 * rows);
  m.slots = a.Add(8 * rows);
  m.kv_indptr = a.Add(4 * (n_seq + 1));
  m.last_page_len = a.Add(4 * n_seq);
  m.logit_rows = a.Add(4 * std::max<int64_t>(logit_rows, 1));
  m.temperature = a.Add(4 * std::max<int64_t>(logit_rows, 1));
  m.top_p = a.Add(4 * std::max<int64_t>(logit_rows, 1));
  m.u = a.Add(8 * std::max<int64_t>(logit_rows, 1));
  m.qo_prompt = a.Add(4 * (n_seq + 1));
  m.relay_rows = a.Add(4 * (groups + 1));
  m.relay_indptr = a.Add(4 * (groups + 1));
  m.relay_last = a.Add(4 * std::max(groups, 1));
  m.kv_indices = a.Add(4 * std::max<int64_t>(pages, 1));
  m.relay_indices = a.Add(4 * std::max<int64_t>(relay_pages, 1));
  m.bytes = a.size;
  return m;
}

int64_t ContextBucket(int64_t tokens) {
  int64_t pow2 = 1;
  while (pow2 < tokens) pow2 <<= 1;
  const int64_t grain = std::max<int64_t>(256, pow2 / 16);
  return (tokens + grain - 1) / grain * grain;
}

int64_t TypicalTokens(int64_t decode_tokens, int decodes, int64_t max_bucket) {
  if (decodes <= 0 || decode_tokens <= 0) return 0;
  const int64_t typical = ContextBucket((decode_tokens + decodes - 1) / decodes);
  return typical < max_bucket ? typical : 0;
}

bool WantsToken(const ForwardEntry& e) { return (e.logits != nullptr || e.token != nullptr) && !e.tokens.empty(); }

absl::Status PlanStep(absl::Span<const ForwardEntry> batch, const ModelConfig& c, const KvPool& pool,
                      bool use_graphs, int64_t relay_min_saved_tokens, StepPlan* plan) {
  const int page = pool.page_tokens();
  Step& step = plan->step;
  int64_t rows = 0, logit_rows = 0;
  bool graphable = true;  // decodes only, no logits out: a graph can run it
  for (const ForwardEntry& e : batch) {
    const auto* s = dynamic_cast<const CudaSequence*>(e.seq);
    if (s == nullptr || s->pool() != &pool) return absl::InvalidArgumentError("a sequence of another backend");
    const int64_t len = e.start_pos + static_cast<int64_t>(e.tokens.size());
    if (e.start_pos < s->first() || len > s->capacity()) {
      return absl::InvalidArgumentError(e.start_pos < s->first() ? "tokens inside the sequence's shared prefix"
                                                                 : "tokens past the sequence's capacity");
    }
    for (int32_t t : e.tokens) {
      if (t < 0 || t >= c.vocab_size) return absl::InvalidArgumentError(absl::StrCat("token ", t, " out of range"));
    }
    rows += static_cast<int64_t>(e.tokens.size());
    logit_rows += WantsToken(e);
    graphable = graphable && e.tokens.size() == 1 && e.logits == nullptr && e.token != nullptr;
  }
  // Relay groups: decodes on one prefix (the same prefix sequence and shared pages), two or
  // more, saving enough reads.
  using GroupKey = std::pair<const SequenceState*, int>;
  std::vector<std::pair<GroupKey, std::vector<size_t>>> groups;
  if (relay_min_saved_tokens >= 0) {
    for (size_t b = 0; b < batch.size(); ++b) {
      const auto& s = static_cast<const CudaSequence&>(*batch[b].seq);
      if (batch[b].tokens.size() != 1 || !s.on_prefix()) continue;
      const GroupKey key{s.prefix(), s.shared_pages()};
      auto it = std::find_if(groups.begin(), groups.end(), [&](const auto& g) { return g.first == key; });
      if (it == groups.end()) it = groups.insert(groups.end(), {key, {}});
      it->second.push_back(b);
    }
    std::erase_if(groups, [&](const auto& g) {
      const auto rows = static_cast<int64_t>(g.second.size());
      return rows < 2 || (rows - 1) * g.first.second * page < relay_min_saved_tokens;
    });
  }
  // Entries in step order: grouped decodes by group, the other decodes, then prompt chunks.
  std::vector<size_t>& order = plan->order;
  order.reserve(batch.size());
  std::vector<bool> grouped(batch.size(), false);
  plan->group_rows.assign(1, 0);
  int64_t max_prefix = 0, relay_pages = 0;
  for (const auto& [key, members] : groups) {
    for (size_t b : members) {
      order.push_back(b);
      grouped[b] = true;
    }
    plan->group_rows.push_back(static_cast<int>(order.size()));
    step.max_group_rows = std::max(step.max_group_rows, static_cast<int>(members.size()));
    max_prefix = std::max(max_prefix, int64_t{key.second} * page);
    relay_pages += key.second;
  }
  step.groups = static_cast<int>(groups.size());
  step.grouped_rows = static_cast<int>(order.size());
  for (int pass = 0; pass < 2; ++pass) {
    for (size_t b = 0; b < batch.size(); ++b) {
      if (!grouped[b] && (batch[b].tokens.size() == 1) == (pass == 0)) order.push_back(b);
    }
  }
  // Decode rows read their own pages' tokens (all of them unless grouped).
  int64_t total_pages = 0, max_tokens = 0, decode_tokens = 0;
  for (size_t b = 0; b < batch.size(); ++b) {
    const ForwardEntry& e = batch[b];
    const auto& s = static_cast<const CudaSequence&>(*e.seq);
    const int64_t len = e.start_pos + static_cast<int64_t>(e.tokens.size());
    const int64_t skipped = grouped[b] ? int64_t{s.shared_pages()} * page : 0;
    total_pages += (len - skipped + page - 1) / page;
    if (e.tokens.size() == 1) {
      ++step.decodes;
      max_tokens = std::max(max_tokens, len - skipped);
      decode_tokens += len - skipped;
    } else {
      step.max_new = std::max(step.max_new, static_cast<int>(e.tokens.size()));
      step.max_prompt_keys = std::max(step.max_prompt_keys, len);
    }
  }
  plan->rows = rows;
  plan->logit_rows = logit_rows;
  if (rows == 0) return absl::OkStatus();
  step.rows = static_cast<int>(rows);
  step.n_seq = static_cast<int>(batch.size());
  step.logit_rows = static_cast<int>(logit_rows);
  // See ContextBucket: decodes are shaped by (batch, context bucket), graph or not.
  plan->graph = graphable && use_graphs;
  step.max_tokens = ContextBucket(max_tokens);
  step.typical_tokens = TypicalTokens(decode_tokens, step.decodes, step.max_tokens);
  step.prefix_bucket = step.groups > 0 ? ContextBucket(max_prefix) : 0;
  // A graph's arrays keep their addresses and sizes for the shape: room for the buckets.
  const int64_t page_capacity = plan->graph ? step.n_seq * ((step.max_tokens + page - 1) / page) : total_pages;
  const int64_t relay_capacity = plan->graph ? step.groups * ((step.prefix_bucket + page - 1) / page) : relay_pages;
  step.meta = MetaLayout(rows, step.n_seq, logit_rows, page_capacity, step.groups, relay_capacity);
  return absl::OkStatus();
}

std::vector<size_t> PackStep(absl::Span<const ForwardEntry> batch, const StepPlan& plan, const KvPool& pool,
                             std::byte* hm) {
  const Step& step = plan.step;
  const int page = pool.page_tokens();
  const std::vector<size_t>& order = plan.order;
  const StepMeta& off = step.meta;
  auto* ids = reinterpret_cast<int32_t*>(hm + off.ids);
  auto* positions = reinterpret_cast<int32_t*>(hm + off.positions);
  auto* slots = reinterpret_cast<int64_t*>(hm + off.slots);
  auto* qo_prompt = reinterpret_cast<int32_t*>(hm + off.qo_prompt);
  auto* kv_indptr = reinterpret_cast<int32_t*>(hm + off.kv_indptr);
  auto* kv_indices = reinterpret_cast<int32_t*>(hm + off.kv_indices);
  auto* last_page_len = reinterpret_cast<int32_t*>(hm + off.last_page_len);
  auto* lrows = reinterpret_cast<int32_t*>(hm + off.logit_rows);
  auto* temperature = reinterpret_cast<float*>(hm + off.temperature);
  auto* top_p = reinterpret_cast<float*>(hm + off.top_p);
  auto* u = reinterpret_cast<double*>(hm + off.u);
  std::vector<size_t> token_entry;  // logit row -> entry
  token_entry.reserve(static_cast<size_t>(plan.logit_rows));
  int64_t row = 0, page_at = 0;
  kv_indptr[0] = 0;
  qo_prompt[0] = 0;
  for (int k = 0; k < step.n_seq; ++k) {
    const ForwardEntry& e = batch[order[static_cast<size_t>(k)]];
    const auto& s = static_cast<const CudaSequence&>(*e.seq);
    for (size_t i = 0; i < e.tokens.size(); ++i, ++row) {
      ids[row] = e.tokens[i];
      positions[row] = static_cast<int32_t>(e.start_pos + static_cast<int64_t>(i));
      slots[row] = pool.Slot(s, positions[row]);
    }
    if (k >= step.decodes) qo_prompt[k - step.decodes + 1] = static_cast<int32_t>(row - step.decodes);
    const int64_t len = e.start_pos + static_cast<int64_t>(e.tokens.size());
    const int64_t used = (len + page - 1) / page;
    // A grouped decode's list starts after the prefix's pages (the group reads those).
    const int64_t own_from = k < step.grouped_rows ? s.shared_pages() : 0;
    for (int64_t p = own_from; p < used; ++p) kv_indices[page_at++] = s.pages()[static_cast<size_t>(p)];
    kv_indptr[k + 1] = static_cast<int32_t>(page_at);
    last_page_len[k] = static_cast<int32_t>(len - (used - 1) * page);
    if (WantsToken(e)) {
      const size_t lr = token_entry.size();
      temperature[lr] = e.sampling.temperature;
      top_p[lr] = e.sampling.top_p;
      u[lr] = e.sampling.u;
      lrows[lr] = static_cast<int32_t>(row - 1);
      token_entry.push_back(order[static_cast<size_t>(k)]);
    }
  }
  // The relay groups: their rows and their prefix's pages (the first member's first pages).
  auto* relay_rows = reinterpret_cast<int32_t*>(hm + off.relay_rows);
  auto* relay_indptr = reinterpret_cast<int32_t*>(hm + off.relay_indptr);
  auto* relay_last = reinterpret_cast<int32_t*>(hm + off.relay_last);
  auto* relay_indices = reinterpret_cast<int32_t*>(hm + off.relay_indices);
  relay_indptr[0] = 0;
  int64_t relay_at = 0;
  for (int g = 0; g <= step.groups; ++g) relay_rows[g] = plan.group_rows[static_cast<size_t>(g)];
  for (int g = 0; g < step.groups; ++g) {
    const auto& s = static_cast<const CudaSequence&>(*batch[order[static_cast<size_t>(plan.group_rows[g])]].seq);
    for (int p = 0; p < s.shared_pages(); ++p) relay_indices[relay_at++] = s.pages()[static_cast<size_t>(p)];
    relay_indptr[g + 1] = static_cast<int32_t>(relay_at);
    relay_last[g] = page;
  }
  return token_entry;
}

}  // namespace strata::model::cuda_internal
