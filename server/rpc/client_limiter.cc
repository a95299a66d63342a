#include "server/rpc/client_limiter.h"

#include "absl/strings/str_cat.h"
#include "kiln/v1/errors.pb.h"
#include "proto/error_detail.h"

namespace kiln::server {

ClientLimiter::Slot::Slot(Slot&& other) noexcept
    : owner_(other.owner_), client_(std::move(other.client_)), status_(other.status_) {
  other.owner_ = nullptr;
}

ClientLimiter::Slot::~Slot() {
  if (owner_ != nullptr && status_.ok()) owner_->Release(client_);
}

ClientLimiter::Slot ClientLimiter::Acquire(const std::string& client) {
  MutexLock lock(&mu_);
  int64_t& n = in_flight_[client];
  if (max_ > 0 && n >= max_) {
    v1::ErrorDetail detail;
    detail.set_retry_after_ms(500);
    return Slot(nullptr, client,
                WithErrorDetail(absl::ResourceExhaustedError(absl::StrCat(
                                    "client ", client, " already has ", n,
                                    " requests in flight (the limit per client is ", max_, ")")),
                                detail));
  }
  ++n;
  return Slot(this, client, absl::OkStatus());
}

int64_t ClientLimiter::in_flight(const std::string& client) const {
  MutexLock lock(&mu_);
  auto it = in_flight_.find(client);
  return it == in_flight_.end() ? 0 : it->second;
}

void ClientLimiter::Release(const std::string& client) {
  MutexLock lock(&mu_);
  auto it = in_flight_.find(client);
  if (it != in_flight_.end() && --it->second == 0) in_flight_.erase(it);
}

}  // namespace kiln::server
