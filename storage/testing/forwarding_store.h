// ForwardingStore: a SessionStore that passes every call to another, for tests that
// change what one call does (override it, call ForwardingStore's to pass it on). Leases
// come from the store behind it and go back to it.
#ifndef STRATA_STORAGE_TESTING_FORWARDING_STORE_H_
#define STRATA_STORAGE_TESTING_FORWARDING_STORE_H_

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "storage/session_store.h"

namespace strata::storage::testing {

class ForwardingStore : public SessionStore {
 public:
  explicit ForwardingStore(SessionStore* to) : to_(to) {}

  PrefixMatch Match(const SessionKey& key, absl::Span<const int32_t> tokens, int64_t max_tokens,
                    std::string_view base) override {
    return to_->Match(key, tokens, max_tokens, base);
  }
  PrefixMatch MatchAcrossCut(const SessionKey& key, absl::Span<const int32_t> tokens, int64_t cut,
                             int64_t max_tokens, std::string_view base) override {
    return to_->MatchAcrossCut(key, tokens, cut, max_tokens, base);
  }
  void Touch(const SessionKey& key) override { to_->Touch(key); }
  void CountReuse(const SessionKey& key, int64_t matched, int64_t tokens) override {
    to_->CountReuse(key, matched, tokens);
  }
  absl::StatusOr<ChunkLease> Lease(const SessionKey& key, int64_t tokens) override { return to_->Lease(key, tokens); }
  absl::StatusOr<int64_t> Read(const SessionKey& key, int64_t tokens, VisitFn visit) override {
    return to_->Read(key, tokens, std::move(visit));
  }
  void Promote(const SessionKey& key, PromoteDone done) override { to_->Promote(key, std::move(done)); }
  void SetLookAhead(const std::vector<SessionKey>& queued) override { to_->SetLookAhead(queued); }
  bool Hint(const SessionKey& key) override { return to_->Hint(key); }
  double ssd_read_bytes_per_second() const override { return to_->ssd_read_bytes_per_second(); }
  absl::Status Save(const SessionKey& key, absl::Span<const int32_t> tokens, int64_t keep_tokens, FillFn fill,
                    std::string_view base) override {
    return to_->Save(key, tokens, keep_tokens, std::move(fill), base);
  }
  absl::StatusOr<uint64_t> SaveAsync(const SessionKey& key, absl::Span<const int32_t> tokens, int64_t keep_tokens,
                                     FillFn fill, std::string_view base) override {
    return to_->SaveAsync(key, tokens, keep_tokens, std::move(fill), base);
  }
  void FinishFill(uint64_t ticket, absl::Status filled) override { to_->FinishFill(ticket, std::move(filled)); }
  absl::Status Flush(const SessionKey& key, absl::Duration timeout) override { return to_->Flush(key, timeout); }
  absl::Status AwaitWriteBacks(absl::Duration timeout) override { return to_->AwaitWriteBacks(timeout); }
  absl::StatusOr<SessionInfo> Get(const SessionKey& key) const override { return to_->Get(key); }
  absl::Status Drop(const SessionKey& key) override { return to_->Drop(key); }
  std::vector<SessionInfo> List(const std::string& tenant) const override { return to_->List(tenant); }
  IdPrefixTotals TotalsOfIdPrefix(std::string_view prefix) const override { return to_->TotalsOfIdPrefix(prefix); }
  SessionStoreStats Stats() const override { return to_->Stats(); }
  SessionStoreStats TenantStats(const std::string& tenant) const override { return to_->TenantStats(tenant); }
  std::vector<TierIoSample> TakeIoSamples() override { return to_->TakeIoSamples(); }
  const ChunkLayout& layout() const override { return to_->layout(); }
  absl::Span<std::byte> host_arena() const override { return to_->host_arena(); }

 private:
  void ReleaseLease(std::vector<uint32_t>) override {}  // (its leases are the other store's)

  SessionStore* to_;
};

}  // namespace strata::storage::testing

#endif  // STRATA_STORAGE_TESTING_FORWARDING_STORE_H_
