// What makes the SSD data file self-describing costs, and what a rebuild of a lost index
// takes (storage/index_rebuild.h):
//   1. the chunk descriptor's bytes per chunk, against the header page that holds it and
//      the block, for the built-in model and a Llama-3-8B-shaped layout;
//   2. the write-back's sealing of one chunk (payload checksum + header) without and with
//      the descriptor (CPU);
//   3. a store start with its index intact vs lost (rebuilt from the data file: every
//      header page scanned, every chosen version read and verified), for N persisted
//      sessions.
//
//   build/tests/bench/index_rebuild_bench [--dir=DIR] [--sessions=N] [--quick]
//
// DIR (default: ./index-rebuild-bench-data) must be on the file system to measure; it is
// removed at the end.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "storage/chunk_format.h"
#include "storage/session_store.h"

namespace {

using namespace strata::storage;
using Clock = std::chrono::steady_clock;

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

struct Shape {
  const char* name;
  ChunkLayout layout;
};

// Names as a deployment might use them: a tenant, a UUID session id, a system prompt id.
ChunkDescriptor TypicalDescriptor(const ChunkLayout& layout) {
  ChunkDescriptor d;
  d.tenant = "tenant-01";
  d.session_id = "3f2b8c1e-9a4d-4e7b-b1c2-5d6e7f8a9b0c";
  d.base = "sp:0123456789abcdef";
  d.session_tokens = static_cast<uint32_t>(4 * layout.chunk_tokens);
  d.chunk_count = 4;
  d.tokens.assign(static_cast<size_t>(layout.chunk_tokens), 1234);
  return d;
}

void DescriptorTable(const std::vector<Shape>& shapes) {
  std::printf("\n1. Chunk descriptor per chunk (typical names: 9 + 36 + 19 bytes)\n\n");
  std::printf("| layout | chunk tokens | descriptor bytes | header page | block bytes | bytes added per block |\n");
  std::printf("|---|---:|---:|---:|---:|---:|\n");
  for (const Shape& s : shapes) {
    const int64_t d = ChunkDescriptorBytes(TypicalDescriptor(s.layout));
    std::printf("| %s | %d | %lld (%.2f%% of the block) | %lld | %lld | 0 |\n", s.name, s.layout.chunk_tokens,
                static_cast<long long>(d), 100.0 * static_cast<double>(d) / static_cast<double>(s.layout.BlockBytes()),
                static_cast<long long>(kChunkHeaderBytes), static_cast<long long>(s.layout.BlockBytes()));
  }
  std::printf("\nLargest chunk that carries a descriptor with those names: %lld tokens.\n",
              static_cast<long long>(MaxDescribedChunkTokens(9 + 36 + 19)));
}

void SealTable(const std::vector<Shape>& shapes, int reps) {
  std::printf("\n2. Write-back sealing of one chunk (CPU): the payload's checksum, then the header\n\n");
  std::printf("| layout | payload checksum | seal | seal with descriptor | descriptor's share of the chunk's CPU |\n");
  std::printf("|---|---:|---:|---:|---:|\n");
  for (const Shape& s : shapes) {
    std::vector<std::byte> block(static_cast<size_t>(s.layout.BlockBytes()), std::byte{0x3c});
    absl::Span<std::byte> span(block);
    const ChunkDescriptor d = TypicalDescriptor(s.layout);
    WriteChunkHeader(s.layout, 1, s.layout.chunk_tokens, span);
    // The best of five runs of `n` calls, after a warm-up run: the machine is shared.
    auto best = [](int n, auto&& call) {
      double fastest = 1e9;
      for (int run = 0; run < 6; ++run) {
        const Clock::time_point t0 = Clock::now();
        for (int r = 0; r < n; ++r) call(r);
        if (run > 0) fastest = std::min(fastest, Seconds(Clock::now() - t0) / n);
      }
      return fastest;
    };
    uint64_t checksum = 0;
    const double hash = best(reps, [&](int) { checksum += ChunkPayloadChecksum(s.layout, span); });
    const double described = best(200 * reps, [&](int r) { SealChunkHeader(span, checksum + r, d); });
    WriteChunkHeader(s.layout, 1, s.layout.chunk_tokens, span);  // no descriptor to keep
    const double plain = best(200 * reps, [&](int r) { SealChunkHeader(span, checksum + r); });
    std::printf("| %s | %.1f us | %.2f us | %.2f us | %.3f%% |\n", s.name, hash * 1e6, plain * 1e6, described * 1e6,
                100.0 * (described - plain) / (hash + plain));
  }
}

SessionStoreOptions StoreOptions(const std::string& dir, const ChunkLayout& layout, int64_t ssd_blocks) {
  SessionStoreOptions o;
  o.layout = layout;
  o.model_fingerprint = 7;
  o.host_capacity_bytes = 64 * layout.BlockBytes();
  o.ssd_dirs = {dir + "/ssd"};
  o.ssd_capacity_bytes_per_dir = ssd_blocks * layout.BlockBytes();
  o.index_dir = dir + "/index";
  o.ssd_read_bytes_per_second = 1e9;  // no probe: the starts time recovery alone
  return o;
}

void RebuildTable(const std::string& dir, const Shape& shape, int sessions) {
  const ChunkLayout& layout = shape.layout;
  constexpr int kChunks = 4;
  std::filesystem::remove_all(dir);
  const SessionStoreOptions o = StoreOptions(dir, layout, int64_t{sessions} * kChunks + 64);
  {
    auto store = SessionStore::Create(o);
    if (!store.ok()) {
      std::fprintf(stderr, "SessionStore::Create: %s\n", store.status().ToString().c_str());
      std::exit(1);
    }
    std::vector<int32_t> tokens(static_cast<size_t>(kChunks * layout.chunk_tokens));
    for (int s = 0; s < sessions; ++s) {
      for (size_t t = 0; t < tokens.size(); ++t) tokens[t] = static_cast<int32_t>(s * 7 + t);
      const SessionKey key{"tenant-01", absl::StrCat("session-", s)};
      absl::Status saved = (*store)->Save(
          key, tokens, 0, [&](int64_t, int, absl::Span<std::byte> p) { std::memset(p.data(), s & 0xff, p.size()); });
      if (saved.ok()) saved = (*store)->Flush(key, absl::Seconds(60));
      if (!saved.ok()) {
        std::fprintf(stderr, "persist: %s\n", saved.ToString().c_str());
        std::exit(1);
      }
    }
  }
  auto start = [&](const char* what) {
    const Clock::time_point t0 = Clock::now();
    auto store = SessionStore::Create(o);
    const double seconds = Seconds(Clock::now() - t0);
    if (!store.ok()) std::exit(1);
    const SessionStoreStats st = (*store)->Stats();
    std::printf("| %s | %d | %lld | %lld | %.3f s |\n", what, sessions, static_cast<long long>(st.ssd_sessions),
                static_cast<long long>(st.index_rebuilt_sessions), seconds);
  };
  std::printf("\n3. Store start, %d sessions of %d chunks (%s, %.1f MiB on SSD)\n\n", sessions, kChunks, shape.name,
              static_cast<double>(int64_t{sessions} * kChunks * layout.BlockBytes()) / (1 << 20));
  std::printf("| index | sessions persisted | sessions recovered | rebuilt | start |\n|---|---:|---:|---:|---:|\n");
  start("intact");
  std::filesystem::remove_all(dir + "/index");
  start("lost (deleted), rebuilt");
  start("intact again");
  std::filesystem::remove_all(dir);
}

}  // namespace

int main(int argc, char** argv) {
  std::string dir = "index-rebuild-bench-data";
  int sessions = 256;
  bool quick = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a.rfind("--dir=", 0) == 0) dir = a.substr(6);
    if (a.rfind("--sessions=", 0) == 0) sessions = std::stoi(a.substr(11));
    if (a == "--quick") quick = true;
  }
  if (quick) sessions = 8;
  // The built-in model (8 layers, 2 KV heads of 64) in f32 on the CPU and bf16 on the GPU;
  // a Llama-3-8B shape (32 layers, 8 KV heads of 128, bf16).
  const std::vector<Shape> shapes = {
      {"built-in, f32", {.layers = 8, .chunk_tokens = 256, .row_bytes = 2 * 64 * 4}},
      {"built-in, bf16", {.layers = 8, .chunk_tokens = 256, .row_bytes = 2 * 64 * 2}},
      {"Llama-3-8B, bf16", {.layers = 32, .chunk_tokens = 256, .row_bytes = 8 * 128 * 2}},
  };
  DescriptorTable(shapes);
  SealTable(shapes, quick ? 2 : 20);
  RebuildTable(dir, shapes[1], sessions);
  return 0;
}
