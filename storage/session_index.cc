#include "storage/session_index.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "rocksdb/db.h"
#include "rocksdb/env.h"
#include "rocksdb/options.h"
#include "rocksdb/write_batch.h"
#include "base/log.h"
#include "storage/acked_writes.h"
#include "storage/write_journal.h"
#include "xxhash.h"

namespace strata::storage {
namespace {

constexpr uint32_t kMagic = 0x53535231;  // "SSR1"
// Version 2 adds the base after the tokens, version 3 the generation after the base;
// older records still decode (generation 0, no base).
constexpr uint32_t kVersion = 3;
// No record is larger than this: a bigger length field is damage.
constexpr uint64_t kMaxField = uint64_t{1} << 28;

class Writer {
 public:
  template <typename T>
  void Put(T v) {
    static_assert(std::is_trivially_copyable_v<T>);
    out_.append(reinterpret_cast<const char*>(&v), sizeof(T));
  }
  void PutString(std::string_view s) {
    Put(static_cast<uint32_t>(s.size()));
    out_.append(s);
  }
  std::string& out() { return out_; }

 private:
  std::string out_;
};

class Reader {
 public:
  explicit Reader(std::string_view in) : in_(in) {}
  template <typename T>
  bool Get(T* v) {
    if (in_.size() < sizeof(T)) return false;
    std::memcpy(v, in_.data(), sizeof(T));
    in_.remove_prefix(sizeof(T));
    return true;
  }
  bool GetString(std::string* s) {
    uint32_t n = 0;
    if (!Get(&n) || n > in_.size()) return false;
    s->assign(in_.substr(0, n));
    in_.remove_prefix(n);
    return true;
  }
  bool done() const { return in_.empty(); }

 private:
  std::string_view in_;
};

absl::Status FromRocks(const rocksdb::Status& s, absl::string_view what) {
  if (s.ok()) return absl::OkStatus();
  std::string msg = absl::StrCat(what, ": ", s.ToString());
  if (s.IsNotFound()) return absl::NotFoundError(msg);
  if (s.IsCorruption()) return absl::DataLossError(msg);
  if (s.IsNoSpace()) return absl::ResourceExhaustedError(msg);
  if (s.IsIOError()) return absl::UnavailableError(msg);
  return absl::InternalError(msg);
}

}  // namespace

std::string EncodeSessionRecord(const SessionRecord& r) {
  Writer w;
  w.Put(kMagic);
  w.Put(kVersion);
  w.PutString(r.tenant);
  w.PutString(r.session_id);
  w.Put(r.model_fingerprint);
  w.Put(r.last_access_unix_ms);
  w.Put(r.expires_unix_ms);
  w.Put(static_cast<uint32_t>(r.tokens.size()));
  w.out().append(reinterpret_cast<const char*>(r.tokens.data()), r.tokens.size() * sizeof(int32_t));
  w.PutString(r.base);
  w.Put(r.generation);
  w.Put(static_cast<uint32_t>(r.chunks.size()));
  for (const IndexedChunk& c : r.chunks) {
    w.Put(c.file);
    w.Put(c.offset);
    w.Put(c.tokens);
    w.Put(c.checksum);
  }
  w.Put(static_cast<uint64_t>(XXH3_64bits(w.out().data(), w.out().size())));
  return std::move(w.out());
}

absl::StatusOr<SessionRecord> DecodeSessionRecord(std::string_view bytes) {
  if (bytes.size() < 16) return absl::DataLossError("session record is truncated");
  uint64_t stored = 0;
  std::memcpy(&stored, bytes.data() + bytes.size() - sizeof(stored), sizeof(stored));
  std::string_view body = bytes.substr(0, bytes.size() - sizeof(stored));
  if (XXH3_64bits(body.data(), body.size()) != stored) {
    return absl::DataLossError("session record checksum mismatch");
  }
  Reader in(body);
  uint32_t magic = 0, version = 0, n_tokens = 0, n_chunks = 0;
  if (!in.Get(&magic) || magic != kMagic) return absl::DataLossError("not a session record");
  if (!in.Get(&version) || version < 1 || version > kVersion) {
    return absl::DataLossError(absl::StrCat("session record version ", version, " is not one of 1..", kVersion));
  }
  SessionRecord r;
  bool ok = in.GetString(&r.tenant) && in.GetString(&r.session_id) && in.Get(&r.model_fingerprint) &&
            in.Get(&r.last_access_unix_ms) && in.Get(&r.expires_unix_ms) && in.Get(&n_tokens) &&
            n_tokens < kMaxField;
  if (ok) {
    r.tokens.resize(n_tokens);
    for (uint32_t i = 0; ok && i < n_tokens; ++i) ok = in.Get(&r.tokens[i]);
  }
  if (ok && version >= 2) ok = in.GetString(&r.base);
  if (ok && version >= 3) ok = in.Get(&r.generation);
  ok = ok && in.Get(&n_chunks) && n_chunks < kMaxField;
  if (ok) {
    r.chunks.resize(n_chunks);
    for (IndexedChunk& c : r.chunks) {
      ok = ok && in.Get(&c.file) && in.Get(&c.offset) && in.Get(&c.tokens) && in.Get(&c.checksum);
    }
  }
  if (!ok || !in.done()) return absl::DataLossError("session record is malformed");
  return r;
}

namespace {

rocksdb::Options IndexOptions(rocksdb::Env* env) {
  rocksdb::Options options;
  if (env != nullptr) options.env = env;
  options.create_if_missing = true;
  options.paranoid_checks = true;
  options.max_open_files = 256;
  options.keep_log_file_num = 4;
  // Records are small (token IDs and chunk locations): small files, little to reserve.
  options.write_buffer_size = 4 << 20;
  options.manifest_preallocation_size = 256 << 10;
  // A torn last record is what a crash leaves (tolerated); damage inside the log is not
  // (Open fails, and OpenDamaged decides).
  options.wal_recovery_mode = rocksdb::WALRecoveryMode::kTolerateCorruptedTailRecords;
  return options;
}

// Copies the index in `dir` to `<dir>.damaged-<time>` (a new name each time) for
// inspection; returns the copy's path, or "" (and why in `*error`) when it could not be made.
std::string CopyAside(const std::string& dir, std::string* error) {
  const std::string stem =
      absl::StrCat(dir, ".damaged-", absl::FormatTime("%Y%m%d-%H%M%S", absl::Now(), absl::UTCTimeZone()));
  std::string aside = stem;
  std::error_code ec;
  for (int n = 2; std::filesystem::exists(aside, ec); ++n) aside = absl::StrCat(stem, "-", n);
  std::filesystem::copy(dir, aside, std::filesystem::copy_options::recursive, ec);
  if (!ec) return aside;
  *error = ec.message();
  return "";
}

// The database in `dir` failed to open with `why` (not for lack of room): copies it aside,
// then replays the log skipping damaged records, or repairs it, or starts it empty.
// Returns the database and says what was done in `note`.
absl::StatusOr<rocksdb::DB*> OpenDamaged(const std::string& dir, const rocksdb::Status& why, std::string* note,
                                         rocksdb::Env* env) {
  std::string error;
  const std::string aside = CopyAside(dir, &error);
  std::error_code ec;
  const std::string kept = aside.empty() ? absl::StrCat("(it could not be copied aside: ", error, ")")
                                         : absl::StrCat("(the damaged index is kept in ", aside, ")");
  rocksdb::Options skip = IndexOptions(env);
  skip.wal_recovery_mode = rocksdb::WALRecoveryMode::kSkipAnyCorruptedRecords;
  rocksdb::DB* db = nullptr;
  if (rocksdb::DB::Open(skip, dir, &db).ok()) {
    *note = absl::StrCat("the session index's log was damaged (", why.ToString(),
                         "); it was replayed skipping the damaged records, whose sessions are lost ", kept);
    return db;
  }
  if (rocksdb::RepairDB(dir, skip).ok() && rocksdb::DB::Open(skip, dir, &db).ok()) {
    *note = absl::StrCat("the session index was damaged (", why.ToString(),
                         "); it was repaired from its tables and log, and what could not be read is lost ", kept);
    return db;
  }
  std::filesystem::remove_all(dir, ec);
  rocksdb::Status fresh = rocksdb::DB::Open(IndexOptions(env), dir, &db);
  if (!fresh.ok()) return FromRocks(fresh, absl::StrCat("cannot start a new session index in ", dir));
  *note = absl::StrCat("the session index was damaged beyond repair (", why.ToString(),
                       "); it starts empty, and the sessions it named are lost ", kept);
  return db;
}

// Opens the database in `dir` read-only; OK with a null `db` when there is none yet.
rocksdb::Status OpenReadOnly(const std::string& dir, rocksdb::Env* env, rocksdb::DB** db) {
  *db = nullptr;
  std::error_code ec;
  if (!std::filesystem::exists(std::filesystem::path(dir) / "CURRENT", ec)) return rocksdb::Status::OK();
  return rocksdb::DB::OpenForReadOnly(IndexOptions(env), dir, db);
}

// "" when a file can be created in `dir`; otherwise why not (a read-only file system).
std::string WriteProbe(const std::string& dir) {
  const std::string probe = (std::filesystem::path(dir) / ".strata-write-probe").string();
  const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return absl::StrCat("cannot write in ", dir, ": ", std::strerror(errno));
  ::close(fd);
  ::unlink(probe.c_str());
  return "";
}

}  // namespace

int64_t SessionIndex::FreeBytes(const std::string& path) {
  std::filesystem::path dir(path);
  std::error_code ec;
  while (!dir.empty() && !std::filesystem::exists(dir, ec)) dir = dir.parent_path();
  auto space = std::filesystem::space(dir.empty() ? "." : dir, ec);
  return ec ? -1 : static_cast<int64_t>(space.available);
}

absl::StatusOr<std::unique_ptr<SessionIndex>> SessionIndex::Open(const std::string& dir, WriteJournal* journal) {
  std::unique_ptr<rocksdb::Env> env;
  if (journal != nullptr) env = rocksdb::NewCompositeEnv(journal->IndexFileSystem());
  // Read before RocksDB opens: a database damaged beyond repair is started anew without it.
  absl::StatusOr<std::unique_ptr<AckedWrites>> acked = AckedWrites::Open(dir);
  auto make = [&](std::unique_ptr<rocksdb::DB> db, std::string read_only_reason) {
    std::unique_ptr<SessionIndex> index(new SessionIndex(dir, std::move(db), std::move(read_only_reason)));
    index->env_ = std::move(env);
    if (acked.ok()) {
      MutexLock lock(&index->write_mu_);
      index->acked_ = *std::move(acked);
    } else {
      index->lost_note_ = absl::StrCat("cannot check the session index for lost acknowledged writes: ",
                                       acked.status().message());
    }
    index->CheckAcknowledged();
    return index;
  };
  const int64_t free_bytes = FreeBytes(dir);
  std::string why;
  if (free_bytes >= 0 && free_bytes < kMinFreeBytes) {
    why = absl::StrCat("its file system has ", free_bytes, " bytes free (", kMinFreeBytes, " needed to write)");
  } else {
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    if (ec) {
      why = absl::StrCat("cannot create ", dir, ": ", ec.message());
    } else {
      why = WriteProbe(dir);
    }
    if (why.empty()) {
      const bool existed = std::filesystem::exists(std::filesystem::path(dir) / "CURRENT", ec);
      rocksdb::DB* db = nullptr;
      rocksdb::Status s = rocksdb::DB::Open(IndexOptions(env.get()), dir, &db);
      if (s.ok()) {
        std::unique_ptr<SessionIndex> index = make(std::unique_ptr<rocksdb::DB>(db), "");
        index->created_at_open_ = !existed;
        return index;
      }
      // The file system takes writes: the database itself is damaged.
      std::string note;
      absl::StatusOr<rocksdb::DB*> repaired = OpenDamaged(dir, s, &note, env.get());
      if (!repaired.ok()) return repaired.status();
      std::unique_ptr<SessionIndex> index = make(std::unique_ptr<rocksdb::DB>(*repaired), "");
      index->damage_note_ = std::move(note);
      return index;
    }
  }
  // Read-only: what is persisted stays readable, nothing is written.
  rocksdb::DB* db = nullptr;
  rocksdb::Status s = OpenReadOnly(dir, env.get(), &db);
  if (!s.ok()) {
    // Damaged, and nothing can be written to repair it: the store starts without what it
    // holds (host-only caching) and repairs it at a start with room.
    std::unique_ptr<SessionIndex> index = make(nullptr, why);
    index->damage_note_ = absl::StrCat("the session index in ", dir, " cannot be read (", s.ToString(),
                                       ") and its file system takes no writes (", why,
                                       "), so it is not repaired in this run");
    return index;
  }
  return make(std::unique_ptr<rocksdb::DB>(db), why);
}

SessionIndex::SessionIndex(std::string dir, std::unique_ptr<rocksdb::DB> db, std::string read_only_reason)
    : dir_(std::move(dir)), db_(std::move(db)), read_only_reason_(std::move(read_only_reason)) {}

SessionIndex::~SessionIndex() {
  if (db_ != nullptr) db_->Close().PermitUncheckedError();
}

bool SessionIndex::read_only() const {
  std::lock_guard<std::mutex> lock(mu_);
  return !read_only_reason_.empty();
}

std::string SessionIndex::read_only_reason() const {
  std::lock_guard<std::mutex> lock(mu_);
  return read_only_reason_;
}

absl::Status SessionIndex::Refuse() const {
  std::lock_guard<std::mutex> lock(mu_);
  if (read_only_reason_.empty()) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat("the session index is read-only: ", read_only_reason_));
}

absl::Status SessionIndex::Written(absl::Status s) {
  if (!s.ok() && !absl::IsNotFound(s)) {
    std::lock_guard<std::mutex> lock(mu_);
    if (read_only_reason_.empty()) read_only_reason_ = absl::StrCat("a write failed: ", s.message());
  }
  return s;
}

namespace {

std::string Named(const LostWrite& w) {
  return absl::StrCat(w.tenant, "/", w.session_id, w.deleted ? " (a deletion)" : "");
}

}  // namespace

void SessionIndex::CheckAcknowledged() {
  MutexLock lock(&write_mu_);
  if (acked_ == nullptr) return;
  const uint64_t recovered = db_ != nullptr ? db_->GetLatestSequenceNumber() : 0;
  std::vector<AckedWrites::Write> named;
  acked_->Lost(recovered, &lost_writes_, &named);
  if (lost_writes_ == 0) return;
  std::vector<std::string> names;
  for (const AckedWrites::Write& w : named) {
    const size_t nul = w.key.find('\0');
    LostWrite lost;
    lost.tenant = w.key.substr(0, nul);
    lost.session_id = nul == std::string::npos ? "" : w.key.substr(nul + 1);
    lost.deleted = w.deleted;
    names.push_back(Named(lost));
    lost_named_.push_back(std::move(lost));
  }
  const int64_t unnamed = lost_writes_ - static_cast<int64_t>(lost_named_.size());
  lost_note_ = absl::StrCat(
      "the session index lost ", lost_writes_, " acknowledged writes (it holds them up to sequence number ",
      recovered, ", they were acknowledged up to ", acked_->found().sequence,
      "; its log was cut short or damaged, or its files replaced): ",
      names.empty() ? "" : absl::StrCat("lost ", absl::StrJoin(names, ", ")),
      unnamed > 0 ? absl::StrCat(names.empty() ? "" : " and ", unnamed, " earlier writes not named") : "",
      "; their persisted sessions are gone (a lost deletion may bring its session back). Check the disk and "
      "file system holding ", dir_);
  if (!read_only()) ResetAcknowledged();
}

void SessionIndex::ResetAcknowledged() {
  if (acked_ == nullptr || db_ == nullptr || lost_writes_ == 0) return;
  // A failure leaves the record ahead: the same loss is reported again at the next start.
  if (absl::Status s = acked_->Reset(db_->GetLatestSequenceNumber()); !s.ok()) {
    LOG(WARNING) << "session index: cannot start the record of acknowledged writes over: " << s;
  }
}

void SessionIndex::Acknowledge(bool deleted, std::string_view key) {
  if (acked_ == nullptr) return;
  // The write is durable whatever happens here; a record left behind only checks less.
  absl::Status s = acked_->Record(db_->GetLatestSequenceNumber(), deleted, key);
  if (!s.ok() && acked_failures_++ % 1000 == 0) {
    LOG(WARNING) << "session index: cannot record an acknowledged write (" << acked_failures_
                 << " failed so far; lost writes may go unnoticed at the next start): " << s;
  }
}

absl::Status SessionIndex::ReopenWritable() {
  if (!read_only()) return absl::OkStatus();
  const int64_t free_bytes = FreeBytes(dir_);
  if (free_bytes >= 0 && free_bytes < kMinFreeBytes) {
    return absl::FailedPreconditionError(absl::StrCat("the index's file system has ", free_bytes, " bytes free"));
  }
  if (db_ != nullptr) {
    db_->Close().PermitUncheckedError();
    db_.reset();
  }
  std::error_code ec;
  std::filesystem::create_directories(dir_, ec);
  rocksdb::DB* db = nullptr;
  rocksdb::Status s = ec ? rocksdb::Status::IOError(ec.message()) : rocksdb::DB::Open(IndexOptions(env_.get()), dir_, &db);
  if (!s.ok()) {
    // Back to reading what there is.
    if (OpenReadOnly(dir_, env_.get(), &db).ok()) db_.reset(db);
    return absl::FailedPreconditionError(absl::StrCat("cannot reopen the session index for writing: ", s.ToString()));
  }
  db_.reset(db);
  {
    std::lock_guard<std::mutex> lock(mu_);
    read_only_reason_.clear();
  }
  MutexLock lock(&write_mu_);
  ResetAcknowledged();
  return absl::OkStatus();
}

std::string SessionIndex::Key(const std::string& tenant, const std::string& session_id) {
  std::string k = tenant;
  k.push_back('\0');
  k += session_id;
  return k;
}

absl::Status SessionIndex::Put(const SessionRecord& record) {
  if (absl::Status r = Refuse(); !r.ok()) return r;
  rocksdb::WriteOptions wo;
  wo.sync = true;
  const std::string key = Key(record.tenant, record.session_id);
  MutexLock lock(&write_mu_);
  absl::Status s = Written(FromRocks(db_->Put(wo, key, EncodeSessionRecord(record)), "session index put"));
  if (s.ok()) Acknowledge(/*deleted=*/false, key);
  return s;
}

absl::Status SessionIndex::Delete(const std::string& tenant, const std::string& session_id) {
  if (absl::Status r = Refuse(); !r.ok()) return r;
  std::string value;
  rocksdb::Status g = db_->Get(rocksdb::ReadOptions(), Key(tenant, session_id), &value);
  if (g.IsNotFound()) return absl::NotFoundError(absl::StrCat("no index record for '", session_id, "'"));
  return DeleteKey(Key(tenant, session_id));
}

absl::Status SessionIndex::DeleteKey(std::string_view key) {
  if (absl::Status r = Refuse(); !r.ok()) return r;
  rocksdb::WriteOptions wo;
  wo.sync = true;
  MutexLock lock(&write_mu_);
  absl::Status s =
      Written(FromRocks(db_->Delete(wo, rocksdb::Slice(key.data(), key.size())), "session index delete"));
  if (s.ok()) Acknowledge(/*deleted=*/true, key);
  return s;
}

bool SessionIndex::Empty() const {
  if (db_ == nullptr) return true;  // read-only, and no database yet
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(rocksdb::ReadOptions()));
  it->SeekToFirst();
  return !it->Valid();
}

absl::Status SessionIndex::StartOver(const std::vector<SessionRecord>& records, bool set_aside, std::string* aside) {
  if (absl::Status r = Refuse(); !r.ok()) return r;
  MutexLock lock(&write_mu_);
  if (set_aside) {
    std::string error;
    *aside = CopyAside(dir_, &error);
    if (aside->empty()) LOG(WARNING) << "session index: cannot copy " << dir_ << " aside: " << error;
  }
  db_->Close().PermitUncheckedError();
  db_.reset();
  // DestroyDB removes the database's own files (through the journal's file system in
  // crash tests) and leaves the record of acknowledged writes, whose file acked_ holds open.
  const rocksdb::Options options = IndexOptions(env_.get());
  rocksdb::Status s = rocksdb::DestroyDB(dir_, options);
  rocksdb::DB* db = nullptr;
  if (s.ok()) s = rocksdb::DB::Open(options, dir_, &db);
  if (!s.ok()) {
    if (OpenReadOnly(dir_, env_.get(), &db).ok()) db_.reset(db);
    return Written(FromRocks(s, absl::StrCat("cannot start the session index in ", dir_, " over")));
  }
  db_.reset(db);
  rocksdb::WriteBatch batch;
  for (const SessionRecord& r : records) batch.Put(Key(r.tenant, r.session_id), EncodeSessionRecord(r));
  rocksdb::WriteOptions wo;
  wo.sync = true;
  if (absl::Status w = Written(FromRocks(db_->Write(wo, &batch), "session index rebuild")); !w.ok()) return w;
  if (acked_ != nullptr) {
    if (absl::Status a = acked_->Reset(db_->GetLatestSequenceNumber()); !a.ok()) {
      LOG(WARNING) << "session index: cannot start the record of acknowledged writes over: " << a;
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<SessionRecord> SessionIndex::Get(const std::string& tenant,
                                                const std::string& session_id) const {
  std::string value;
  if (db_ == nullptr) return absl::NotFoundError(absl::StrCat("no index record for '", session_id, "'"));
  rocksdb::Status s = db_->Get(rocksdb::ReadOptions(), Key(tenant, session_id), &value);
  if (s.IsNotFound()) return absl::NotFoundError(absl::StrCat("no index record for '", session_id, "'"));
  if (!s.ok()) return FromRocks(s, "session index get");
  return DecodeSessionRecord(value);
}

absl::Status SessionIndex::ForEach(
    const std::function<void(const SessionRecord&)>& visit,
    const std::function<void(std::string_view key, const absl::Status&)>& bad) const {
  if (db_ == nullptr) return absl::OkStatus();  // read-only, and no database yet
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(rocksdb::ReadOptions()));
  for (it->SeekToFirst(); it->Valid(); it->Next()) {
    std::string_view key(it->key().data(), it->key().size());
    absl::StatusOr<SessionRecord> r = DecodeSessionRecord(std::string_view(it->value().data(), it->value().size()));
    if (r.ok() && Key(r->tenant, r->session_id) != key) r = absl::DataLossError("record is stored under another key");
    if (r.ok()) {
      visit(*r);
    } else {
      bad(key, r.status());
    }
  }
  return FromRocks(it->status(), "session index scan");
}

}  // namespace strata::storage
