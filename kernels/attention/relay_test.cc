// Relay decode attention on the device (relay.h) against the CPU specification of decode
// attention over each row's whole sequence (PagedDecodeAttention: the shared prefix's pages
// then the row's own), and against the device's plain decode over the same pages, on random
// pools over a grid: head_dim 64/80/96/128/256, 1 to 16 query heads per KV head, pages of 16/32
// tokens, prefixes of 1 page to 8K tokens, groups of 1 to 64 rows, rows with no prefix
// mixed in, contexts of 1 to 2K tokens, and a sharp softmax.
//
// Tolerances are the tensor-core prefill's (prefill_test.cc: the system part rounds Q and
// P to bf16): ||got - want|| / ||want|| <= 1e-2 over the call, <= 2e-2 per (row, head).
// Outputs and workspaces are poisoned with NaN first, so an unwritten element fails. Each
// case runs every form (the fused launch where the shape takes it, the three launches, and
// the three with the system part on a side stream, with either stream slowed on purpose
// and as a graph, and chained on one stream with the decode a programmatic dependent of the
// system part, which must give the one-stream three's bits), and the default form again
// as a CUDA graph, replayed twice (the second time on new queries written into the same
// buffer), which must give the eager launch's bits.
#include "kernels/attention/relay.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/attention/decode.h"
#include "kernels/cuda_check.h"
#include "kernels/elementwise/bf16.h"
#include "kernels/testing/attention_compare.h"
#include "kernels/testing/attention_cpu.h"
#include "kernels/testing/cuda_testing.h"
#include "kernels/testing/delay.h"
#include "kernels/testing/paged_pool.h"

namespace strata::kernels {
namespace {

using test_support::DeviceVector;

struct RelayCase {
  std::vector<int64_t> prefixes;  // tokens of each group's prefix (whole pages)
  std::vector<int> group_sizes;   // rows of each group
  std::vector<int64_t> contexts;  // own tokens of each row (grouped rows first)
  int kv_heads, group, head_dim, page_size;
  float q_range;
};

std::string Describe(const RelayCase& c) {
  std::string s = "head_dim " + std::to_string(c.head_dim) + " gqa " + std::to_string(c.group) + " page " +
                  std::to_string(c.page_size) + " q_range " + std::to_string(c.q_range) + " groups:";
  for (size_t g = 0; g < c.prefixes.size(); ++g) {
    s += " " + std::to_string(c.group_sizes[g]) + "x" + std::to_string(c.prefixes[g]);
  }
  return s + " rows " + std::to_string(c.contexts.size());
}

// Index arrays of one view (indptr / indices / last_page_len).
struct View {
  std::vector<int32_t> indptr{0}, indices, last;
  void Add(const std::vector<int32_t>& pages, int32_t last_len) {
    indices.insert(indices.end(), pages.begin(), pages.end());
    indptr.push_back(static_cast<int32_t>(indices.size()));
    last.push_back(last_len);
  }
};

struct DeviceView {
  // (A view of no groups still gets one element of each array: nothing reads it.)
  explicit DeviceView(const View& v)
      : indptr(NonEmpty(v.indptr)), indices(NonEmpty(v.indices)), last(NonEmpty(v.last)) {}
  static std::vector<int32_t> NonEmpty(std::vector<int32_t> v) {
    if (v.empty()) v.push_back(0);
    return v;
  }
  PagedKv On(const uint16_t* k, const uint16_t* vp, const test_support::PagedPool& p) {
    return PagedKv{k, vp, p.page_size, p.kv_heads, p.head_dim, indptr.get(), indices.get(), last.get()};
  }
  DeviceVector<int32_t> indptr, indices, last;
};

class CudaRelayAttentionTest : public test_support::GpuTest {
 protected:
  void SetUp() override {
    test_support::GpuTest::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    ASSERT_EQ(cudaStreamCreateWithFlags(&side_, cudaStreamNonBlocking), cudaSuccess);
    ASSERT_EQ(cudaEventCreateWithFlags(&fork_, cudaEventDisableTiming), cudaSuccess);
    ASSERT_EQ(cudaEventCreateWithFlags(&join_, cudaEventDisableTiming), cudaSuccess);
  }
  void TearDown() override {
    for (cudaEvent_t e : {fork_, join_}) {
      if (e != nullptr) cudaEventDestroy(e);
    }
    if (side_ != nullptr) cudaStreamDestroy(side_);
    test_support::GpuTest::TearDown();
  }

  void Check(const RelayCase& c, uint32_t seed) {
    const std::string what = Describe(c);
    const int groups = static_cast<int>(c.prefixes.size());
    const int rows = static_cast<int>(c.contexts.size());
    const int heads = c.kv_heads * c.group, d = c.head_dim;
    // One pool holding the prefixes and then every row's own tokens.
    std::vector<int64_t> lengths = c.prefixes;
    lengths.insert(lengths.end(), c.contexts.begin(), c.contexts.end());
    const test_support::PagedPool pool = test_support::RandomPagedPool(lengths, c.page_size, c.kv_heads, d, seed);
    auto pages_of = [&](int s) {
      return std::vector<int32_t>(pool.indices.begin() + pool.indptr[s], pool.indices.begin() + pool.indptr[s + 1]);
    };
    View full, context, prefix;
    std::vector<int32_t> group_rows{0};
    int max_group_rows = 0;
    for (int g = 0; g < groups; ++g) {
      prefix.Add(pages_of(g), c.page_size);
      group_rows.push_back(group_rows.back() + c.group_sizes[g]);
      max_group_rows = std::max(max_group_rows, c.group_sizes[g]);
    }
    int64_t max_context = 0;
    for (int r = 0; r < rows; ++r) {
      const int g =
          static_cast<int>(std::upper_bound(group_rows.begin(), group_rows.end(), r) - group_rows.begin()) - 1;
      std::vector<int32_t> own = pages_of(groups + r), all;
      if (g < groups) all = pages_of(g);
      all.insert(all.end(), own.begin(), own.end());
      full.Add(all, pool.last_page_len[groups + r]);
      context.Add(own, pool.last_page_len[groups + r]);
      max_context = std::max(max_context, c.contexts[r]);
    }
    const std::vector<float> q =
        test_support::RandomFloats(static_cast<size_t>(rows) * heads * d, seed + 1, -c.q_range, c.q_range);
    const float scale = 1.0f / std::sqrt(static_cast<float>(d));
    std::vector<float> want(q.size());
    test_support::PagedPool whole = pool;
    whole.indptr = full.indptr;
    whole.indices = full.indices;
    whole.last_page_len = full.last;
    PagedDecodeAttention(q.data(), whole.View(), rows, heads, scale, want.data(), nullptr);

    DeviceVector<uint16_t> dk(pool.k), dv(pool.v);
    DeviceView dfull(full), dcontext(context), dprefix(prefix);
    DeviceVector<int32_t> dgroups(group_rows);
    DeviceVector<float> dq(q);
    const int grouped = group_rows.back();
    const int64_t max_prefix = groups == 0 ? 0 : *std::max_element(c.prefixes.begin(), c.prefixes.end());
    const RelayShape shape{rows, groups, grouped, max_group_rows, heads, c.kv_heads, d, max_context, max_prefix};
    DeviceVector<float> ws{std::vector<float>(
        static_cast<size_t>(std::max<int64_t>(1, RelayDecodeWorkspaceFloats(shape))), std::nanf(""))};
    DeviceVector<float> out{std::vector<float>(q.size(), std::nanf(""))};
    const RelayDecodeParams p{dq.get(),
                              dcontext.On(dk.get(), dv.get(), pool),
                              dprefix.On(dk.get(), dv.get(), pool),
                              dgroups.get(),
                              rows,
                              groups,
                              grouped,
                              max_group_rows,
                              heads,
                              scale,
                              max_context,
                              max_prefix,
                              ws.get(),
                              out.get()};
    const absl::Status s = LaunchRelayDecodeAttention(p, stream_);
    ASSERT_TRUE(s.ok()) << what << ": " << s;
    Sync();
    const std::vector<float> got = out.ToHost();
    test_support::ExpectAttentionNear(got, want, rows, heads, d, what + " (relay vs CPU)");
    // The context part forced to either kernel (RelayDecodeParams::context_kernel: the CUDA
    // cores take the fused launch, the tensor cores the three) in the workspace the shape was
    // given, followed by a guard that must stay untouched.
    for (DecodeKernel kernel : {DecodeKernel::kCudaCores, DecodeKernel::kTensorCores}) {
      const size_t ws_floats = static_cast<size_t>(std::max<int64_t>(1, RelayDecodeWorkspaceFloats(shape)));
      constexpr size_t kGuard = 4096;
      DeviceVector<float> ws_k{std::vector<float>(ws_floats + kGuard, -7.0f)};
      DeviceVector<float> out_k{std::vector<float>(q.size(), std::nanf(""))};
      RelayDecodeParams pk = p;
      pk.context_kernel = kernel;
      pk.workspace = ws_k.get();
      pk.out = out_k.get();
      const std::string form = what + (kernel == DecodeKernel::kCudaCores ? " (context on CUDA cores" : " (context on tensor cores");
      ASSERT_TRUE(LaunchRelayDecodeAttention(pk, stream_).ok()) << form << ")";
      Sync();
      test_support::ExpectAttentionNear(out_k.ToHost(), want, rows, heads, d, form + " vs CPU)");
      const std::vector<float> after = ws_k.ToHost();
      EXPECT_TRUE(std::all_of(after.begin() + static_cast<std::ptrdiff_t>(ws_floats), after.end(),
                              [](float x) { return x == -7.0f; }))
          << form << ": wrote past the workspace RelayDecodeWorkspaceFloats sized)";
      // The o projection's bf16 input written by the launch itself (out_bf16): the bf16
      // rounding of this form's rows, every one (grouped rows from the merge, the others
      // cast or, with no groups, from the decode).
      {
        const std::vector<float> rows_fp32 = out_k.ToHost();
        DeviceVector<uint16_t> out_bf16{std::vector<uint16_t>(q.size(), 0x7fc1)};  // a NaN no rounding gives
        DeviceVector<float> scratch{std::vector<float>(q.size(), std::nanf(""))};
        RelayDecodeParams pb = pk;
        pb.out = scratch.get();
        pb.out_bf16 = out_bf16.get();
        ASSERT_TRUE(LaunchRelayDecodeAttention(pb, stream_).ok()) << form << ", bf16 out)";
        Sync();
        const std::vector<uint16_t> got_bf16 = out_bf16.ToHost();
        int wrong = 0;
        for (size_t i = 0; i < got_bf16.size(); ++i) wrong += got_bf16[i] != FloatToBf16(rows_fp32[i]);
        EXPECT_EQ(wrong, 0) << form << ", bf16 out): elements not the bf16 of the fp32 rows";
      }
      // With programmatic dependent launch (Hopper) and the context part on the tensor cores,
      // the default form is the three launches chained (kRelayChainedOnTensorCores): their
      // bits; kRelayChainedNever keeps the three launches on one stream.
      if (kernel == DecodeKernel::kTensorCores && groups > 0 && CurrentDeviceComputeCapability() >= 90) {
        const std::vector<float> got_default = out_k.ToHost();
        internal::RelayTuning chained_tc;
        chained_tc.three_launches = chained_tc.chained = true;
        chained_tc.system_form = internal::RelaySystemForm::kWgmmaWs;
        chained_tc.context_kernel = DecodeKernel::kTensorCores;
        chained_tc.system_min_part_keys = internal::kRelayChainedMinPartKeys;
        ASSERT_TRUE(internal::LaunchRelayDecodeAttention(pk, chained_tc, stream_).ok()) << form << ")";
        Sync();
        EXPECT_TRUE(out_k.ToHost() == got_default) << form << ", default): not the chained form's bits";
        RelayDecodeParams never = pk;
        never.chained_min_context_tokens = kRelayChainedNever;
        ASSERT_TRUE(LaunchRelayDecodeAttention(never, stream_).ok()) << form << ")";
        Sync();
        const std::vector<float> got_never = out_k.ToHost();
        internal::RelayTuning three_tc;
        three_tc.three_launches = true;
        three_tc.context_kernel = DecodeKernel::kTensorCores;
        ASSERT_TRUE(internal::LaunchRelayDecodeAttention(pk, three_tc, stream_).ok()) << form << ")";
        Sync();
        EXPECT_TRUE(out_k.ToHost() == got_never) << form << ", never chained): not the three launches' bits";
      }
    }
    {  // Split by the rows' mean context (RelayDecodeParams::typical_context_tokens), fused and
       // in three launches: more parts where the rows differ (empty contexts: the most), the
       // same answer, in the workspace the shape was given.
      int64_t total = 0;
      for (int64_t n : c.contexts) total += n;
      RelayDecodeParams pt = p;
      pt.typical_context_tokens = std::max<int64_t>(1, (total + rows - 1) / std::max(1, rows));
      for (bool three_launches : {false, true}) {
        DeviceVector<float> ws_t{std::vector<float>(
            static_cast<size_t>(std::max<int64_t>(1, RelayDecodeWorkspaceFloats(shape))), std::nanf(""))};
        DeviceVector<float> out_t{std::vector<float>(q.size(), std::nanf(""))};
        pt.workspace = ws_t.get();
        pt.out = out_t.get();
        internal::RelayTuning t;
        t.three_launches = three_launches;
        ASSERT_TRUE(three_launches ? internal::LaunchRelayDecodeAttention(pt, t, stream_).ok()
                                   : LaunchRelayDecodeAttention(pt, stream_).ok())
            << what;
        Sync();
        test_support::ExpectAttentionNear(out_t.ToHost(), want, rows, heads, d,
                                          what + (three_launches ? " (three launches" : " (relay") +
                                              " split by the mean context vs CPU)");
      }
    }

    // The three-launch form on the same inputs (its workspace poisoned again).
    DeviceVector<float> ws_three{std::vector<float>(
        static_cast<size_t>(std::max<int64_t>(1, RelayDecodeWorkspaceFloats(shape))), std::nanf(""))};
    DeviceVector<float> out_three{std::vector<float>(q.size(), std::nanf(""))};
    RelayDecodeParams three = p;
    three.workspace = ws_three.get();
    three.out = out_three.get();
    internal::RelayTuning three_launches;
    three_launches.three_launches = true;
    ASSERT_TRUE(internal::LaunchRelayDecodeAttention(three, three_launches, stream_).ok()) << what;
    Sync();
    const std::vector<float> got_three = out_three.ToHost();
    test_support::ExpectAttentionNear(got_three, want, rows, heads, d, what + " (three launches vs CPU)");
    {  // The Hopper form of the system part (mma.sync where the device has none).
      internal::RelayTuning t = three_launches;
      t.system_form = internal::RelaySystemForm::kWgmmaWs;
      DeviceVector<float> out_form{std::vector<float>(q.size(), std::nanf(""))};
      RelayDecodeParams pf = three;
      pf.out = out_form.get();
      ASSERT_TRUE(internal::LaunchRelayDecodeAttention(pf, t, stream_).ok()) << what;
      Sync();
      const std::vector<float> got_form = out_form.ToHost();
      test_support::ExpectAttentionNear(got_form, want, rows, heads, d, what + " (system part on wgmma vs CPU)");
      // Chained (below: the decode behind the wgmma system part): its bits.
      t.chained = true;
      ASSERT_EQ(cudaMemset(out_form.get(), 0xff, out_form.size() * sizeof(float)), cudaSuccess);
      ASSERT_TRUE(internal::LaunchRelayDecodeAttention(pf, t, stream_).ok()) << what;
      Sync();
      EXPECT_TRUE(out_form.ToHost() == got_form) << what << ": chained on the wgmma system part differs";
      // Chained with the system part's split aimed at a quarter of the SMs (fewer, longer
      // parts), the decode on either kernel: the same attention within bf16.
      for (DecodeKernel kernel : {DecodeKernel::kCudaCores, DecodeKernel::kTensorCores}) {
        internal::RelayTuning share = t;
        share.system_sms = std::max(1, CurrentDeviceSmCount() / 4);
        share.context_kernel = kernel;
        DeviceVector<float> ws_share{std::vector<float>(
            static_cast<size_t>(std::max<int64_t>(1, internal::RelayDecodeWorkspaceFloats(shape, share))),
            std::nanf(""))};
        RelayDecodeParams ps = pf;
        ps.workspace = ws_share.get();
        ASSERT_EQ(cudaMemset(out_form.get(), 0xff, out_form.size() * sizeof(float)), cudaSuccess);
        ASSERT_TRUE(internal::LaunchRelayDecodeAttention(ps, share, stream_).ok()) << what;
        Sync();
        test_support::ExpectAttentionNear(
            out_form.ToHost(), want, rows, heads, d,
            what + " (chained, system part on a quarter of the SMs, decode on " +
                (kernel == DecodeKernel::kCudaCores ? "CUDA" : "tensor") + " cores, vs CPU)");
      }
    }

    // The three launches with the system part on a side stream: the same kernels on the same
    // inputs, so the same bits, with either stream slowed on purpose. (1) The side stream
    // slowed before the launch: without the join the merge would take the poisoned parts.
    // (2) The launch's stream slowed, then writing the queries: without the fork the system
    // part would read them before they land (NaN). (3) Captured in a graph and replayed.
    internal::RelayTuning beside = three_launches;
    beside.beside = true;
    RelayDecodeParams side_p = three;
    side_p.side = {side_, fork_, join_};
    auto poison = [&] {
      ASSERT_EQ(cudaMemset(ws_three.get(), 0xff, ws_three.size() * sizeof(float)), cudaSuccess);
      ASSERT_EQ(cudaMemset(out_three.get(), 0xff, out_three.size() * sizeof(float)), cudaSuccess);
    };
    // Runs `run` (which enqueues on stream_) over poisoned outputs, and expects the one-stream
    // three launches' bits.
    auto expect_three = [&](const std::string& how, const std::function<void()>& run) {
      poison();
      run();
      Sync();
      EXPECT_TRUE(out_three.ToHost() == got_three)
          << what << ": " << how << ", differs from the three launches on one stream";
    };
    auto launch = [&](const RelayDecodeParams& rp, const internal::RelayTuning& rt) {
      ASSERT_TRUE(internal::LaunchRelayDecodeAttention(rp, rt, stream_).ok()) << what;
    };
    // Captures what (rp, rt) enqueues on stream_, into *exec.
    auto instantiate = [&](const RelayDecodeParams& rp, const internal::RelayTuning& rt, cudaGraphExec_t* exec) {
      cudaGraph_t g = nullptr;
      ASSERT_EQ(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal), cudaSuccess);
      const absl::Status captured = internal::LaunchRelayDecodeAttention(rp, rt, stream_);
      ASSERT_EQ(cudaStreamEndCapture(stream_, &g), cudaSuccess) << what << ": the capture did not end joined";
      ASSERT_TRUE(captured.ok()) << what << ": " << captured;
      ASSERT_EQ(cudaGraphInstantiate(exec, g, 0), cudaSuccess);
      cudaGraphDestroy(g);
    };
    DeviceVector<float> late_q{std::vector<float>(q.size(), std::nanf(""))};
    auto write_queries_late = [&] {
      ASSERT_EQ(cudaMemset(late_q.get(), 0xff, late_q.size() * sizeof(float)), cudaSuccess);
      ASSERT_EQ(testing::LaunchDelay(stream_, 500), cudaSuccess);
      ASSERT_EQ(cudaMemcpyAsync(late_q.get(), dq.get(), q.size() * sizeof(float), cudaMemcpyDeviceToDevice, stream_),
                cudaSuccess);
    };
    expect_three("the system part beside the decode, side stream slowed", [&] {
      ASSERT_EQ(testing::LaunchDelay(side_, 500), cudaSuccess);
      launch(side_p, beside);
    });
    RelayDecodeParams side_late = side_p;
    side_late.q = late_q.get();
    expect_three("the system part beside the decode, queries written late on the launch's stream", [&] {
      write_queries_late();
      launch(side_late, beside);
    });
    {
      cudaGraphExec_t e = nullptr;
      ASSERT_NO_FATAL_FAILURE(instantiate(side_p, beside, &e));
      expect_three("a graph of the system part beside the decode", [&] {
        ASSERT_EQ(testing::LaunchDelay(side_, 500), cudaSuccess);
        ASSERT_EQ(cudaGraphLaunch(e, stream_), cudaSuccess);
      });
      cudaGraphExecDestroy(e);
    }

    // Chained on one stream, the decode a programmatic dependent of the system part (an
    // ordinary launch before Hopper): the same kernels, so the same bits, with the queries
    // written late on the stream (the system part must wait for them, and the decode with
    // it), and as a graph replayed twice. The cases' long prefixes beside one-token contexts
    // keep the system part running long after the decode: the merge must wait for both.
    internal::RelayTuning chained = three_launches;
    chained.chained = true;
    RelayDecodeParams chained_p = three;
    chained_p.q = late_q.get();
    expect_three("the three launches chained, queries written late", [&] {
      write_queries_late();
      launch(chained_p, chained);
    });
    {
      cudaGraphExec_t e = nullptr;
      ASSERT_NO_FATAL_FAILURE(instantiate(chained_p, chained, &e));
      for (int replay = 0; replay < 2; ++replay) {
        expect_three("replay " + std::to_string(replay) + " of the three launches chained in a graph",
                     [&] { ASSERT_EQ(cudaGraphLaunch(e, stream_), cudaSuccess); });
      }
      cudaGraphExecDestroy(e);
    }

    // Captured in a graph and replayed: the eager launch's bits, then new queries' bits.
    DeviceVector<float> out_graph{std::vector<float>(q.size(), std::nanf(""))};
    RelayDecodeParams replayed = p;
    replayed.out = out_graph.get();
    cudaGraph_t graph = nullptr;
    cudaGraphExec_t exec = nullptr;
    ASSERT_EQ(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal), cudaSuccess);
    const absl::Status captured = LaunchRelayDecodeAttention(replayed, stream_);
    ASSERT_EQ(cudaStreamEndCapture(stream_, &graph), cudaSuccess);
    ASSERT_TRUE(captured.ok()) << what << ": " << captured;
    ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
    ASSERT_EQ(cudaGraphLaunch(exec, stream_), cudaSuccess);
    Sync();
    EXPECT_TRUE(out_graph.ToHost() == got) << what << ": a graph replay differs from the eager launch";
    const std::vector<float> q2 = test_support::RandomFloats(q.size(), seed + 2, -c.q_range, c.q_range);
    ASSERT_EQ(cudaMemcpy(dq.get(), q2.data(), q2.size() * sizeof(float), cudaMemcpyHostToDevice), cudaSuccess);
    ASSERT_EQ(cudaGraphLaunch(exec, stream_), cudaSuccess);
    Sync();
    const std::vector<float> replay2 = out_graph.ToHost();
    ASSERT_TRUE(LaunchRelayDecodeAttention(p, stream_).ok()) << what;
    Sync();
    EXPECT_TRUE(replay2 == out.ToHost()) << what << ": a replay on new queries differs from their eager launch";
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
    ASSERT_EQ(cudaMemcpy(dq.get(), q.data(), q.size() * sizeof(float), cudaMemcpyHostToDevice), cudaSuccess);

    // The plain device decode over the whole pages, for the same rows.
    int64_t max_full = 0;
    for (int r = 0; r < rows; ++r) max_full = std::max(max_full, PagedSequenceLength(whole.View(), r));
    DeviceVector<float> ws_plain{
        std::vector<float>(static_cast<size_t>(std::max<int64_t>(1, DecodeWorkspaceFloats(rows, heads, d, max_full))))};
    DeviceVector<float> plain{std::vector<float>(q.size(), std::nanf(""))};
    ASSERT_TRUE(LaunchPagedDecodeAttention({dq.get(), dfull.On(dk.get(), dv.get(), pool), rows, heads, scale, max_full,
                                            ws_plain.get(), plain.get(), nullptr},
                                           stream_)
                    .ok());
    Sync();
    // (`out` now holds the replay check's new queries' result: compare the first launch's.)
    test_support::ExpectAttentionNear(got, plain.ToHost(), rows, heads, d,
                                      what + " (relay vs plain decode on the device)");
  }

  cudaStream_t side_ = nullptr;
  cudaEvent_t fork_ = nullptr, join_ = nullptr;
};

TEST_F(CudaRelayAttentionTest, GroupsOnSharedPrefixesMatchPlainDecode) {
  uint32_t seed = 1;
  for (int head_dim : {64, 80, 96, 128, 256}) {
    for (int gqa : {1, 2, 4, 7, 8, 12, 16}) {  // past 8: subgroups
      for (int page : {16, 32}) {
        RelayCase c{{int64_t{4} * page, int64_t{32} * page}, {3, 5}, {}, 2, gqa, head_dim, page, 1.0f};
        for (int r = 0; r < 8 + 2; ++r) c.contexts.push_back(1 + (r * 37) % 150);  // two rows with no prefix
        Check(c, seed++);
      }
    }
  }
}

TEST_F(CudaRelayAttentionTest, LargeGroupsAndLongPromptsAtLlamaShapes) {
  // 64 sessions on one 4K prompt (Llama-3-8B: 8 KV heads, 4 query heads each, head_dim 128).
  RelayCase c{{4096}, {64}, {}, 8, 4, 128, 16, 1.0f};
  for (int r = 0; r < 64; ++r) c.contexts.push_back(128 + (r * 7) % 172);
  Check(c, 11);
  // An 8K prompt and contexts up to 2K, both head sizes.
  for (int head_dim : {64, 128}) {
    RelayCase longest{{8192}, {16}, {}, 8, 4, head_dim, 16, 1.0f};
    for (int r = 0; r < 16; ++r) longest.contexts.push_back(1 + (r * 131) % 2048);
    longest.contexts.back() = 2048;
    Check(longest, 13 + static_cast<uint32_t>(head_dim));
  }
  // A long prompt beside one-token contexts: the system part runs long after the decode
  // (the merge of the forms that overlap them must wait for it).
  RelayCase lopsided{{8192}, {64}, std::vector<int64_t>(64, 1), 8, 4, 128, 16, 1.0f};
  Check(lopsided, 17);
  // Many small groups, groups of one, and a sharp softmax.
  RelayCase many{{}, {}, {}, 2, 8, 64, 16, 8.0f};
  for (int g = 0; g < 12; ++g) {
    many.prefixes.push_back(16 * (1 + g % 5));
    many.group_sizes.push_back(1 + g % 4);
  }
  int grouped = 0;
  for (int n : many.group_sizes) grouped += n;
  for (int r = 0; r < grouped + 3; ++r) many.contexts.push_back(1 + (r * 13) % 300);
  Check(many, 12);
}

TEST_F(CudaRelayAttentionTest, EmptyContextsSeeTheirPrefixAlone) {
  // Grouped rows with no tokens of their own (between rows that have some), at two shapes.
  for (int head_dim : {64, 128}) {
    RelayCase c{{64, 512}, {4, 6}, {}, 2, 4, head_dim, 16, 1.0f};
    for (int r = 0; r < 10 + 1; ++r) c.contexts.push_back(r % 3 == 0 ? 0 : 1 + (r * 29) % 100);
    Check(c, 31 + static_cast<uint32_t>(head_dim));
  }
}

// The three launches split the system part along the prefix so that its blocks take one
// round of the SMs (two blocks each) where they can: a second round of a few blocks would
// double its time. Llama-3-8B shapes (32 query heads, 8 KV heads): one group of `rows`.
TEST_F(CudaRelayAttentionTest, SystemPartSplitsFillOneRoundOfTheSms) {
  // mma.sync: 64-row blocks, two an SM; the warp-specialised form: 128-row blocks, one an SM.
  for (auto [form, tile_rows, per_sm] : {std::tuple{internal::RelaySystemForm::kMmaSync, 64, 2},
                                         std::tuple{internal::RelaySystemForm::kWgmmaWs, 128, 1}}) {
    const int64_t slots = int64_t{per_sm} * CurrentDeviceSmCount();
    for (auto [rows, prefix] : {std::pair{64, 8192}, std::pair{32, 4096}, std::pair{8, 8192}, std::pair{64, 1024}}) {
      const RelayShape shape{rows, 1, rows, rows, 32, 8, 128, 1024, prefix};
      const int64_t blocks = (int64_t{rows} * 4 + tile_rows - 1) / tile_rows * 8;
      const int parts = internal::RelaySystemSplits(shape, form);
      EXPECT_LE(blocks * parts, slots) << rows << " rows of a " << prefix << "-token prefix: " << parts << " parts";
      EXPECT_GE(blocks * parts * 2, std::min<int64_t>(slots, blocks * (prefix / 256)))
          << rows << " rows of a " << prefix << "-token prefix: " << parts << " parts leave most SMs idle";
      // Chained by default: where the prompt holds kRelayChainedMinParts parts of
      // kRelayChainedMinPartKeys, no part shorter, and no fewer parts than that allows where
      // the SMs hold them; at shorter prompts the split above.
      const int64_t min_keys = internal::kRelayChainedMinPartKeys;
      const int chained = internal::RelaySystemSplits(shape, form, 0, min_keys);
      const bool long_parts = prefix / min_keys >= internal::kRelayChainedMinParts;
      EXPECT_EQ(chained, long_parts ? std::min<int64_t>(parts, prefix / min_keys) : parts)
          << rows << " rows of a " << prefix << "-token prefix";
    }
  }
}

TEST_F(CudaRelayAttentionTest, NoGroupsIsPlainDecode) {
  RelayCase c{{}, {}, {5, 100, 260}, 2, 4, 128, 16, 1.0f};
  Check(c, 21);
}

TEST_F(CudaRelayAttentionTest, RejectsASideStreamWithoutItsEventsOrTheLaunchsOwn) {
  RelayDecodeParams p{};
  p.rows = 1;
  p.side = {side_, fork_, nullptr};
  EXPECT_EQ(LaunchRelayDecodeAttention(p, stream_).code(), absl::StatusCode::kInvalidArgument);
  p.side = {stream_, fork_, join_};
  EXPECT_EQ(LaunchRelayDecodeAttention(p, stream_).code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(CudaRelayAttentionTest, RejectsBadCounts) {
  RelayDecodeParams p{};
  p.rows = 2;
  p.groups = 1;
  p.grouped_rows = 3;
  EXPECT_EQ(LaunchRelayDecodeAttention(p, stream_).code(), absl::StatusCode::kInvalidArgument);
  p.grouped_rows = 0;
  EXPECT_EQ(LaunchRelayDecodeAttention(p, stream_).code(), absl::StatusCode::kInvalidArgument);
  // Good counts, but bf16 rows that could not be stored 4 at a time.
  p.grouped_rows = p.max_group_rows = 2;
  p.out_bf16 = reinterpret_cast<uint16_t*>(uintptr_t{2});
  EXPECT_EQ(LaunchRelayDecodeAttention(p, stream_).code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace strata::kernels
