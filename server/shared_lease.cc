#include "server/shared_lease.h"

#include <unistd.h>

#include <algorithm>
#include <random>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "server/observe/json_log.h"

namespace kiln::server {
namespace {

// KEYS[1] the lease, ARGV[1] the holder's token, ARGV[2] the ttl in milliseconds.
constexpr absl::string_view kRenewScript =
    "if redis.call('get', KEYS[1]) == ARGV[1] then "
    "return redis.call('pexpire', KEYS[1], ARGV[2]) else return 0 end";
// KEYS[1] the lease, ARGV[1] the holder's token.
constexpr absl::string_view kReleaseScript =
    "if redis.call('get', KEYS[1]) == ARGV[1] then "
    "return redis.call('del', KEYS[1]) else return 0 end";

// How often a waiter looks at its caller's cancellation while it sleeps between polls.
constexpr absl::Duration kCancelCheck = absl::Milliseconds(20);

std::string NewInstanceId() {
  char host[256] = {};
  if (::gethostname(host, sizeof(host) - 1) != 0) host[0] = '\0';
  std::random_device random;
  const uint64_t part = (static_cast<uint64_t>(random()) << 32) ^ random();
  return absl::StrFormat("%s/%d/%016x", host[0] == '\0' ? "unknown-host" : host, ::getpid(), part);
}

}  // namespace

CompileLeases::Lease& CompileLeases::Lease::operator=(Lease&& other) noexcept {
  if (this != &other) {
    Release();
    owner_ = std::exchange(other.owner_, nullptr);
    key_ = std::move(other.key_);
    token_ = std::move(other.token_);
  }
  return *this;
}

void CompileLeases::Lease::Release() {
  if (owner_ == nullptr) return;
  std::exchange(owner_, nullptr)->Release(key_, token_);
}

absl::StatusOr<std::unique_ptr<CompileLeases>> CompileLeases::Create(cache::RedisCluster* redis,
                                                                     MetricsRegistry* metrics,
                                                                     Options options) {
  if (options.ttl < absl::Milliseconds(3)) {
    return absl::InvalidArgumentError(
        absl::StrCat("the compile lease ttl must be at least 3 ms (it is renewed every ttl/3), "
                     "got ",
                     absl::FormatDuration(options.ttl)));
  }
  if (options.min_poll <= absl::ZeroDuration() || options.max_poll < options.min_poll) {
    return absl::InvalidArgumentError(absl::StrCat(
        "compile lease polls need 0 < min_poll <= max_poll, got ",
        absl::FormatDuration(options.min_poll), " and ", absl::FormatDuration(options.max_poll)));
  }
  return std::unique_ptr<CompileLeases>(new CompileLeases(redis, metrics, std::move(options)));
}

CompileLeases::CompileLeases(cache::RedisCluster* redis, MetricsRegistry* metrics, Options options)
    : redis_(redis), options_(std::move(options)), instance_id_(NewInstanceId()) {
  struct Series {
    const char* name;
    const char* help;
    int64_t Snapshot::*field;
    bool counter;
  };
  static constexpr Series kSeries[] = {
      {"kiln_shared_cache_lease_acquired_total",
       "Compile leases this server took (compiles run under a lease), take-overs included.",
       &Snapshot::acquired, true},
      {"kiln_shared_cache_lease_waited_total",
       "Compiles this server did not start because another server held the lease; it waited "
       "for that server's result.",
       &Snapshot::waited, true},
      {"kiln_shared_cache_lease_taken_over_total",
       "Waits that ended by taking the lease: its holder died or its compile failed.",
       &Snapshot::taken_over, true},
      {"kiln_shared_cache_lease_errors_total",
       "Lease commands the cluster could not answer; a lease that could not be taken means "
       "compiling without one.",
       &Snapshot::errors, true},
      {"kiln_shared_cache_lease_lost_total",
       "Held leases found expired or taken by another server when renewed.", &Snapshot::lost, true},
      {"kiln_shared_cache_leases_held", "Compile leases this server holds now.", &Snapshot::held,
       false},
      {"kiln_shared_cache_lease_waiting", "Compiles waiting now for a lease another server holds.",
       &Snapshot::waiting, false},
  };
  for (const Series& s : kSeries) {
    metrics->AddCallback(
        s.name, s.help,
        [this, field = s.field] { return static_cast<double>(TakeSnapshot().*field); }, s.counter);
  }
  renewer_ = std::thread([this] { RenewLoop(); });
}

CompileLeases::~CompileLeases() {
  {
    MutexLock lock(&mu_);
    stopping_ = true;
    cv_.SignalAll();
  }
  renewer_.join();
}

std::string CompileLeases::KeyOf(absl::string_view name) const {
  // The whole name is the hash tag: a lease lives on one node, whatever braces it holds.
  return absl::StrCat(options_.key_prefix, "{", name, "}");
}

void CompileLeases::NoteError(const absl::Status& status) {
  ++errors_;
  MutexLock lock(&mu_);
  if (failing_) return;
  failing_ = true;
  LogWarning("compile_lease_unavailable",
             {{"error", status.ToString()},
              {"consequence",
               "compiling without leases: other servers may compile the same "
               "graphs until the cluster answers again"}});
}

void CompileLeases::NoteSuccess() {
  MutexLock lock(&mu_);
  if (!failing_) return;
  failing_ = false;
  LogInfo("compile_lease_available", {});
}

absl::StatusOr<std::optional<std::string>> CompileLeases::TrySet(const std::string& key,
                                                                 const std::string& token) {
  const std::string ttl_ms = absl::StrCat(absl::ToInt64Milliseconds(options_.ttl));
  absl::StatusOr<cache::RedisReply> reply =
      redis_->Command(key, {"SET", key, token, "NX", "PX", ttl_ms, "GET"});
  if (!reply.ok()) return reply.status();
  if (reply->type == cache::RedisReply::Type::kNil) return std::nullopt;
  if (reply->type != cache::RedisReply::Type::kString) {
    return absl::InternalError(
        absl::StrCat("SET ", key, " NX GET answered neither a value nor nil"));
  }
  // A SET resent on a fresh connection after its first try was applied finds its own token.
  if (reply->str == token) return std::nullopt;
  return std::move(reply->str);
}

absl::StatusOr<CompileLeases::Outcome> CompileLeases::AcquireOrWait(
    absl::string_view name, const std::function<bool()>& published, absl::Time deadline,
    const std::function<bool()>& cancelled) {
  const std::string key = KeyOf(name);
  bool waited = false;
  std::string holder;
  absl::Duration poll = options_.min_poll;
  struct WaitingCount {
    std::atomic<int64_t>* count = nullptr;
    ~WaitingCount() {
      if (count != nullptr) --*count;
    }
  } waiting_count;
  for (;;) {
    if (cancelled && cancelled()) {
      return absl::CancelledError(absl::StrCat("cancelled while waiting for the compile lease on ",
                                               name, " held by ", holder));
    }
    const std::string token = absl::StrCat(instance_id_, "#", sequence_.fetch_add(1));
    absl::StatusOr<std::optional<std::string>> previous = TrySet(key, token);
    if (!previous.ok()) {
      NoteError(previous.status());
      return Outcome{Turn::kUnleased, Lease()};
    }
    NoteSuccess();
    if (!previous->has_value()) {
      Lease lease;
      lease.owner_ = this;
      lease.key_ = key;
      lease.token_ = token;
      {
        MutexLock lock(&mu_);
        held_[key] = token;
      }
      // Published between our last look and the holder's release: serve it, and let go.
      if (published()) return Outcome{Turn::kPublished, Lease()};
      ++acquired_;
      if (waited) {
        ++taken_over_;
        LogInfo("compile_lease_taken_over", {{"lease", key}, {"previous_holder", holder}});
      }
      return Outcome{Turn::kLeased, std::move(lease)};
    }
    holder = **std::move(previous);
    if (!waited) {
      waited = true;
      ++waited_;
      ++waiting_;
      waiting_count.count = &waiting_;
      LogInfo("compile_lease_waiting", {{"lease", key}, {"holder", holder}});
    }
    const absl::Time wake = std::min(deadline, absl::Now() + poll);
    while (absl::Now() < wake) {
      if (cancelled && cancelled()) break;
      absl::SleepFor(std::min(kCancelCheck, wake - absl::Now()));
    }
    if (cancelled && cancelled()) continue;
    if (published()) return Outcome{Turn::kPublished, Lease()};
    if (absl::Now() >= deadline) {
      return absl::DeadlineExceededError(
          absl::StrCat("deadline exceeded waiting for another kilnd (", holder,
                       ") that holds the compile lease on ", name));
    }
    poll = std::min(poll * 2, options_.max_poll);
  }
}

void CompileLeases::Release(const std::string& key, const std::string& token) {
  {
    MutexLock lock(&mu_);
    auto it = held_.find(key);
    if (it != held_.end() && it->second == token) held_.erase(it);
  }
  absl::StatusOr<cache::RedisReply> reply =
      redis_->Command(key, {"EVAL", kReleaseScript, "1", key, token});
  if (!reply.ok()) {
    // It expires by itself within the ttl; waiters elsewhere take over then.
    NoteError(reply.status());
  }
}

void CompileLeases::RenewLoop() {
  const std::string ttl_ms = absl::StrCat(absl::ToInt64Milliseconds(options_.ttl));
  const absl::Duration every = options_.ttl / 3;
  for (;;) {
    std::vector<std::pair<std::string, std::string>> held;
    {
      MutexLock lock(&mu_);
      if (!stopping_) cv_.WaitWithDeadline(&mu_, absl::Now() + every);
      if (stopping_) return;
      held.assign(held_.begin(), held_.end());
    }
    for (const auto& [key, token] : held) {
      absl::StatusOr<cache::RedisReply> reply =
          redis_->Command(key, {"EVAL", kRenewScript, "1", key, token, ttl_ms});
      if (!reply.ok()) {
        NoteError(reply.status());
        continue;
      }
      if (reply->type == cache::RedisReply::Type::kInteger && reply->integer == 1) continue;
      MutexLock lock(&mu_);
      auto it = held_.find(key);
      // Released meanwhile: not lost.
      if (it == held_.end() || it->second != token) continue;
      held_.erase(it);
      ++lost_;
      LogWarning(
          "compile_lease_lost",
          {{"lease", key}, {"consequence", "another server may compile the same graph meanwhile"}});
    }
  }
}

CompileLeases::Snapshot CompileLeases::TakeSnapshot() const {
  Snapshot s;
  s.instance_id = instance_id_;
  s.ttl = options_.ttl;
  s.waiting = waiting_.load();
  s.acquired = acquired_.load();
  s.waited = waited_.load();
  s.taken_over = taken_over_.load();
  s.errors = errors_.load();
  s.lost = lost_.load();
  MutexLock lock(&mu_);
  s.held = static_cast<int64_t>(held_.size());
  return s;
}

}  // namespace kiln::server
