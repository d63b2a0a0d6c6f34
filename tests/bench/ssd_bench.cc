// Storage tiers against their physical peers, measured in the same run:
//   1. SSD tier write/read throughput vs fio (io_uring, O_DIRECT, fixed buffers, same file
//      system, block size and queue depth), at the built-in model's chunk size and 1 MiB;
//   2. host tier: saving and reading a session's chunks vs a plain memcpy of the same bytes;
//   3. the KV load of a turn whose session must be promoted from SSD vs one on host
//      (latency percentiles).
//
//   build/tests/bench/ssd_bench [--dir=DIR] [--total_mb=N] [--qd=N] [--reps=N] [--quick]
//
// DIR (default: ./ssd-bench-data) must be on the file system to measure; it is removed at
// the end. fio must be on PATH for table 1 (Debian package fio).
#include <stdlib.h>
#include <sys/wait.h>

#include <algorithm>
#include <tuple>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/mutex.h"
#include "storage/io_batch.h"
#include "nlohmann/json.hpp"
#include "storage/host_tier.h"
#include "storage/session_store.h"
#include "storage/ssd_tier.h"

namespace {

using strata::Mutex;
using strata::MutexLock;
using namespace strata::storage;
using Clock = std::chrono::steady_clock;

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

struct AlignedFree {
  void operator()(std::byte* p) const { free(p); }
};
std::unique_ptr<std::byte[], AlignedFree> Aligned(int64_t bytes) {
  void* p = nullptr;
  if (posix_memalign(&p, 4096, static_cast<size_t>(bytes)) != 0) std::abort();
  std::memset(p, 0x3c, static_cast<size_t>(bytes));
  return std::unique_ptr<std::byte[], AlignedFree>(static_cast<std::byte*>(p));
}

// Bytes per second of the SSD tier writing then reading `total` bytes in `block` blocks,
// through buffers from the store's host arena (huge pages) or from 4 KiB pages (as fio's).
std::pair<double, double> StrataThroughput(const std::string& dir, int64_t block, int64_t total, int qd,
                                           bool host_arena) {
  std::filesystem::remove_all(dir);
  SsdTierOptions o;
  o.dirs = {dir};
  o.block_bytes = block;
  o.capacity_bytes_per_dir = total;
  o.queue_depth = qd;
  auto tier = SsdTier::Open(o);
  if (!tier.ok()) {
    std::fprintf(stderr, "SsdTier::Open: %s\n", tier.status().ToString().c_str());
    std::exit(1);
  }
  const int64_t blocks = (*tier)->total_blocks();
  // A host arena of 2 * qd blocks, registered as the store registers its arena.
  const int64_t slots = 2 * qd;
  std::unique_ptr<std::byte[], AlignedFree> small_pages;
  std::unique_ptr<HostTier> host;
  std::byte* arena = nullptr;
  if (host_arena) {
    host = *HostTier::Create(slots * block, block);
    arena = host->arena_base();
    std::memset(arena, 0x3c, static_cast<size_t>(slots * block));
  } else {
    small_pages = Aligned(slots * block);
    arena = small_pages.get();
  }
  if (absl::Status s = (*tier)->RegisterBuffers(arena, slots * block); !s.ok()) {
    std::fprintf(stderr, "note: %s (plain buffers used)\n", s.ToString().c_str());
  }
  std::vector<SsdLocation> locs;
  for (int64_t b = 0; b < blocks; ++b) locs.push_back(*(*tier)->Allocate());
  auto run = [&](bool write) {
    IoBatch done;
    auto t0 = Clock::now();
    for (int64_t b = 0; b < blocks; ++b) {
      std::byte* buf = arena + (b % slots) * block;
      if (write) {
        (*tier)->Write(locs[b], buf, done.Callback());
      } else {
        (*tier)->Read(locs[b], buf, done.Callback());
      }
    }
    absl::Status s = done.Wait();
    double secs = Seconds(Clock::now() - t0);
    if (!s.ok()) {
      std::fprintf(stderr, "SSD I/O failed: %s\n", s.ToString().c_str());
      std::exit(1);
    }
    return static_cast<double>(blocks * block) / secs;
  };
  double w = run(true);
  double r = run(false);
  tier->reset();
  std::filesystem::remove_all(dir);
  return {w, r};
}

// fio's bytes per second for the same pattern, or -1 when fio is missing or fails.
// `iomem` is fio's buffer memory: "malloc" (4 KiB pages) or "shmhuge" (huge pages from the
// vm.nr_hugepages pool, like the host arena's transparent huge pages).
double Fio(const std::string& dir, const std::string& rw, int64_t block, int64_t total, int qd,
           const std::string& iomem) {
  std::filesystem::create_directories(dir);
  const std::string out = dir + "/fio.json";
  std::string cmd = absl::StrCat("fio --name=peer --filename=", dir, "/fio.data --rw=", rw, " --bs=", block,
                                 " --size=", total, " --iodepth=", qd,
                                 " --ioengine=io_uring --direct=1 --fixedbufs=1 --registerfiles=1"
                                 " --fallocate=native --iomem=", iomem, " --output-format=json --output=",
                                 out, " >/dev/null 2>&1");
  if (std::system(cmd.c_str()) != 0) return -1;
  FILE* f = std::fopen(out.c_str(), "r");
  if (f == nullptr) return -1;
  std::string text;
  char buf[4096];
  for (size_t n; (n = std::fread(buf, 1, sizeof(buf), f)) > 0;) text.append(buf, n);
  std::fclose(f);
  auto json = nlohmann::json::parse(text, nullptr, false);
  if (json.is_discarded()) return -1;
  const auto& job = json["jobs"][0][rw == "write" ? "write" : "read"];
  return job["bw_bytes"].get<double>();
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

double Percentile(std::vector<double> v, double p) {
  std::sort(v.begin(), v.end());
  size_t i = std::min(v.size() - 1, static_cast<size_t>(p * static_cast<double>(v.size())));
  return v[i];
}

// The built-in model's chunk layout: 4 layers, 2 KV heads x 64 dims fp32, 256 tokens.
ChunkLayout BuiltinLayout() { return ChunkLayout{.layers = 4, .chunk_tokens = 256, .row_bytes = 512}; }

void HostTable(bool quick) {
  const ChunkLayout layout = BuiltinLayout();
  const int64_t chunks = quick ? 8 : 64;
  const int64_t tokens = chunks * layout.chunk_tokens;
  SessionStoreOptions o;
  o.layout = layout;
  o.model_fingerprint = 42;
  o.host_capacity_bytes = (chunks + 1) * layout.BlockBytes();
  auto store = *SessionStore::Create(o);
  // The engine's side: per (layer, kv) a contiguous run of rows for the whole session.
  const int64_t plane = tokens * layout.row_bytes;
  auto src = Aligned(int64_t{layout.layers} * 2 * plane);
  auto dst = Aligned(int64_t{layout.layers} * 2 * plane);
  std::vector<int32_t> ids(static_cast<size_t>(tokens));
  for (int64_t i = 0; i < tokens; ++i) ids[i] = static_cast<int32_t>(i % 200);
  const int64_t payload_bytes = chunks * layout.PayloadBytes();
  const int reps = quick ? 2 : 10;
  std::vector<double> save_s, read_s, memcpy_s;
  for (int r = 0; r < reps; ++r) {
    auto t0 = Clock::now();
    absl::Status s = store->Save({"b", "s"}, ids, 0, [&](int64_t begin, int count, absl::Span<std::byte> p) {
      for (int l = 0; l < layout.layers; ++l)
        for (int kv = 0; kv < 2; ++kv)
          std::memcpy(p.data() + layout.RowOffset(l, kv, 0), src.get() + (l * 2 + kv) * plane + begin * layout.row_bytes,
                      static_cast<size_t>(count * layout.row_bytes));
    });
    save_s.push_back(Seconds(Clock::now() - t0));
    if (!s.ok()) std::abort();
    t0 = Clock::now();
    auto n = store->Read({"b", "s"}, tokens, [&](int64_t begin, int count, absl::Span<const std::byte> p) {
      for (int l = 0; l < layout.layers; ++l)
        for (int kv = 0; kv < 2; ++kv)
          std::memcpy(dst.get() + (l * 2 + kv) * plane + begin * layout.row_bytes, p.data() + layout.RowOffset(l, kv, 0),
                      static_cast<size_t>(count * layout.row_bytes));
    });
    read_s.push_back(Seconds(Clock::now() - t0));
    if (!n.ok() || *n != tokens) std::abort();
    t0 = Clock::now();
    std::memcpy(dst.get(), src.get(), static_cast<size_t>(payload_bytes));
    memcpy_s.push_back(Seconds(Clock::now() - t0));
  }
  const double gb = static_cast<double>(payload_bytes) / 1e9;
  double mc = gb / Median(memcpy_s), sv = gb / Median(save_s), rd = gb / Median(read_s);
  std::printf("\nHost tier: a session of %lld chunks (%.1f MB of KV), median of %d\n", static_cast<long long>(chunks),
              gb * 1e3, reps);
  std::printf("| operation | GB/s | vs memcpy |\n|---|---|---|\n");
  std::printf("| memcpy of the same bytes | %.2f | 1.00 |\n", mc);
  std::printf("| Save (copy in + seal: XXH3 checksum) | %.2f | %.2f |\n", sv, sv / mc);
  std::printf("| Read (verify: XXH3 checksum + copy out) | %.2f | %.2f |\n", rd, rd / mc);
}

void PromotionTable(const std::string& dir, bool quick) {
  const ChunkLayout layout = BuiltinLayout();
  const int64_t chunks_per_session = 4;  // 1024 tokens of history
  const int host_sessions = 8;
  const int sessions = quick ? 12 : 48;
  std::filesystem::remove_all(dir);
  SessionStoreOptions o;
  o.layout = layout;
  o.model_fingerprint = 42;
  o.host_capacity_bytes = host_sessions * chunks_per_session * layout.BlockBytes();
  o.ssd_dirs = {dir + "/ssd"};
  o.ssd_capacity_bytes_per_dir = (sessions + 4) * chunks_per_session * layout.BlockBytes();
  o.index_dir = dir + "/index";
  auto store = *SessionStore::Create(o);
  const int64_t tokens = chunks_per_session * layout.chunk_tokens;
  std::vector<int32_t> ids(static_cast<size_t>(tokens));
  for (int64_t i = 0; i < tokens; ++i) ids[i] = static_cast<int32_t>(i % 200);
  auto fill = [&](int64_t, int count, absl::Span<std::byte> p) {
    std::memset(p.data(), 7, static_cast<size_t>(count * layout.row_bytes));
  };
  for (int i = 0; i < sessions; ++i) {
    SessionKey k{"b", "s" + std::to_string(i)};
    if (!store->Save(k, ids, 0, fill).ok() || !store->Flush(k, absl::Seconds(30)).ok()) std::abort();
  }
  auto copy = Aligned(layout.PayloadBytes());
  auto load = [&](int i) {
    auto t0 = Clock::now();
    auto n = store->Read({"b", "s" + std::to_string(i)}, tokens, [&](int64_t, int, absl::Span<const std::byte> p) {
      std::memcpy(copy.get(), p.data(), p.size());
    });
    if (!n.ok() || *n != tokens) std::abort();
    return Seconds(Clock::now() - t0) * 1e3;
  };
  std::vector<double> host_ms, ssd_ms;
  const int rounds = quick ? 2 : 6;
  for (int r = 0; r < rounds; ++r) {
    for (int i = 0; i < sessions; ++i) {
      // The most recently used sessions are on host; the one `host_sessions` back is not.
      auto info = store->Get({"b", "s" + std::to_string(i)});
      (info->tier == Tier::kHost ? host_ms : ssd_ms).push_back(load(i));
      // Touch it again at once: now certainly on host.
      host_ms.push_back(load(i));
    }
  }
  std::printf("\nKV load of a turn (%lld tokens, %lld chunks = %.1f MB): session on host vs promoted from SSD\n",
              static_cast<long long>(tokens), static_cast<long long>(chunks_per_session),
              static_cast<double>(chunks_per_session * layout.BlockBytes()) / 1e6);
  std::printf("| where the session is | loads | p50 ms | p99 ms | max ms |\n|---|---|---|---|---|\n");
  auto row = [](const char* name, const std::vector<double>& v) {
    if (v.empty()) return;
    std::printf("| %s | %zu | %.3f | %.3f | %.3f |\n", name, v.size(), Percentile(v, 0.5), Percentile(v, 0.99),
                *std::max_element(v.begin(), v.end()));
  };
  row("host", host_ms);
  row("SSD (promoted)", ssd_ms);
  store.reset();
  std::filesystem::remove_all(dir);
}

}  // namespace

int main(int argc, char** argv) {
  bool quick = false;
  std::string dir = "ssd-bench-data";
  int64_t total_mb = 512;
  int qd = 32;
  int reps_flag = 0;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--quick") {
      quick = true;
    } else if (a.rfind("--dir=", 0) == 0) {
      dir = a.substr(6);
    } else if (a.rfind("--total_mb=", 0) == 0) {
      total_mb = std::stoll(a.substr(11));
    } else if (a.rfind("--reps=", 0) == 0) {
      reps_flag = std::stoi(a.substr(7));
    } else if (a.rfind("--qd=", 0) == 0) {
      qd = std::stoi(a.substr(5));
    } else {
      std::fprintf(stderr, "usage: ssd_bench [--dir=DIR] [--total_mb=N] [--qd=N] [--reps=N] [--quick]\n");
      return 2;
    }
  }
  if (quick) total_mb = std::min<int64_t>(total_mb, 32);
  const int reps = reps_flag > 0 ? reps_flag : quick ? 1 : 5;
  std::printf("SSD tier vs fio: %lld MB per run, queue depth %d, O_DIRECT, registered buffers, dir %s; median of %d rounds, fio and strata alternating\n",
              static_cast<long long>(total_mb), qd, dir.c_str(), reps);
  std::printf(
      "Like with like: the host arena (transparent huge pages) vs fio --iomem=shmhuge (huge pages; needs "
      "vm.nr_hugepages), and the tier on 4 KiB pages vs fio --iomem=malloc.\n");
  std::printf(
      "| block bytes | op | strata, host arena GB/s | fio, huge pages GB/s | arena / fio huge | strata, 4 KiB pages "
      "GB/s | fio, 4 KiB pages GB/s | 4 KiB / fio 4 KiB |\n|---|---|---|---|---|---|---|---|\n");
  bool fio_missing = false, huge_missing = false;
  for (int64_t block : {BuiltinLayout().BlockBytes(), int64_t{1} << 20}) {
    const int64_t total = total_mb * (int64_t{1} << 20) / block * block;
    // Strata and fio take turns (who goes first alternates) so drift in a shared disk's speed
    // hits both; ratios are medians of per-round ratios.
    struct Side {
      std::vector<double> w, r;
    };
    Side arena, pages, fio_huge, fio_pages;
    std::vector<double> rhw, rhr, rpw, rpr;
    for (int r = 0; r < reps; ++r) {
      std::pair<double, double> a, p;
      double fhw = 0, fhr = 0, fpw = 0, fpr = 0;
      auto ours = [&] {
        a = StrataThroughput(dir + "/strata", block, total, qd, true);
        p = StrataThroughput(dir + "/strata", block, total, qd, false);
      };
      auto peer = [&] {
        fhw = Fio(dir + "/fio", "write", block, total, qd, "shmhuge");
        fhr = Fio(dir + "/fio", "read", block, total, qd, "shmhuge");
        fpw = Fio(dir + "/fio", "write", block, total, qd, "malloc");
        fpr = Fio(dir + "/fio", "read", block, total, qd, "malloc");
        std::filesystem::remove_all(dir + "/fio");
      };
      if (r % 2 == 0) {
        ours();
        peer();
      } else {
        peer();
        ours();
      }
      arena.w.push_back(a.first);
      arena.r.push_back(a.second);
      pages.w.push_back(p.first);
      pages.r.push_back(p.second);
      fio_huge.w.push_back(fhw);
      fio_huge.r.push_back(fhr);
      fio_pages.w.push_back(fpw);
      fio_pages.r.push_back(fpr);
      rhw.push_back(a.first / fhw);
      rhr.push_back(a.second / fhr);
      rpw.push_back(p.first / fpw);
      rpr.push_back(p.second / fpr);
    }
    for (bool write : {true, false}) {
      const char* op = write ? "write" : "read";
      auto pick = [write](const Side& s) { return Median(write ? s.w : s.r) / 1e9; };
      const double a = pick(arena), p = pick(pages), fh = pick(fio_huge), fp = pick(fio_pages);
      std::string huge_cells = "n/a | n/a", page_cells = "n/a | n/a";
      if (fh > 0) {
        huge_cells = absl::StrFormat("%.2f | %.2f", fh, Median(write ? rhw : rhr));
      } else {
        huge_missing = true;
      }
      if (fp > 0) {
        page_cells = absl::StrFormat("%.2f | %.2f", fp, Median(write ? rpw : rpr));
      } else {
        fio_missing = true;
      }
      std::printf("| %lld | %s | %.2f | %s | %.2f | %s |\n", static_cast<long long>(block), op, a, huge_cells.c_str(),
                  p, page_cells.c_str());
    }
  }
  if (huge_missing && !fio_missing) {
    std::printf("(fio on huge pages did not run: reserve them, e.g. `sysctl vm.nr_hugepages=1024`)\n");
  }
  if (fio_missing) std::printf("(fio did not run: install the fio package to compare)\n");
  HostTable(quick);
  PromotionTable(dir + "/promotion", quick);
  std::filesystem::remove_all(dir);
  return 0;
}
