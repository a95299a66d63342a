#include "cache/shared/redis_cluster.h"

#include <hiredis/hiredis.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "proto/base/host_port.h"

namespace kiln::cache {
namespace {

// CRC16-CCITT (XModem), the checksum Redis Cluster hashes keys with.
constexpr std::array<uint16_t, 256> MakeCrc16Table() {
  std::array<uint16_t, 256> table{};
  for (int i = 0; i < 256; ++i) {
    uint16_t crc = static_cast<uint16_t>(i << 8);
    for (int bit = 0; bit < 8; ++bit) {
      crc = (crc & 0x8000) ? static_cast<uint16_t>((crc << 1) ^ 0x1021)
                           : static_cast<uint16_t>(crc << 1);
    }
    table[i] = crc;
  }
  return table;
}
constexpr std::array<uint16_t, 256> kCrc16Table = MakeCrc16Table();

uint16_t Crc16(absl::string_view bytes) {
  uint16_t crc = 0;
  for (unsigned char c : bytes) {
    crc = static_cast<uint16_t>((crc << 8) ^ kCrc16Table[((crc >> 8) ^ c) & 0xff]);
  }
  return crc;
}

timeval AtLeastOneMs(absl::Duration d) {
  return absl::ToTimeval(std::max(d, absl::Milliseconds(1)));
}

// "host:port" with a host and a port in 1..65535.
bool ParseAddress(absl::string_view address, std::string* host, int* port) {
  absl::string_view h, p;
  if (!SplitHostPort(address, &h, &p) || h.empty()) return false;
  int n = 0;
  if (!absl::SimpleAtoi(p, &n) || n < 1 || n > 65535) return false;
  *host = std::string(h);
  *port = n;
  return true;
}

RedisReply Convert(const redisReply* r) {
  RedisReply out;
  switch (r->type) {
    case REDIS_REPLY_STRING:
      out.type = RedisReply::Type::kString;
      out.str.assign(r->str, r->len);
      break;
    case REDIS_REPLY_STATUS:
      out.type = RedisReply::Type::kStatus;
      out.str.assign(r->str, r->len);
      break;
    case REDIS_REPLY_ERROR:
      out.type = RedisReply::Type::kError;
      out.str.assign(r->str, r->len);
      break;
    case REDIS_REPLY_INTEGER:
      out.type = RedisReply::Type::kInteger;
      out.integer = r->integer;
      break;
    case REDIS_REPLY_ARRAY:
      out.type = RedisReply::Type::kArray;
      out.elements.reserve(r->elements);
      for (size_t i = 0; i < r->elements; ++i) out.elements.push_back(Convert(r->element[i]));
      break;
    default:
      out.type = RedisReply::Type::kNil;
  }
  return out;
}

// The command's name for messages: its first word, upper case.
std::string CommandName(const std::vector<absl::string_view>& argv) {
  return argv.empty() ? std::string("(empty command)") : absl::AsciiStrToUpper(argv[0]);
}

// Error replies that say the cluster cannot answer now rather than that the command is wrong.
bool IsUnavailableError(absl::string_view message) {
  return absl::StartsWith(message, "CLUSTERDOWN") || absl::StartsWith(message, "LOADING") ||
         absl::StartsWith(message, "MASTERDOWN") || absl::StartsWith(message, "BUSY");
}

}  // namespace

uint16_t RedisKeySlot(absl::string_view key) {
  const size_t open = key.find('{');
  if (open != absl::string_view::npos) {
    const size_t close = key.find('}', open + 1);
    if (close != absl::string_view::npos && close > open + 1) {
      key = key.substr(open + 1, close - open - 1);
    }
  }
  return Crc16(key) & (RedisCluster::kSlots - 1);
}

absl::StatusOr<std::vector<std::string>> ParseRedisClusterUrl(absl::string_view url) {
  constexpr absl::string_view kScheme = "redis://";
  if (!absl::StartsWith(url, kScheme)) {
    return absl::InvalidArgumentError(
        absl::StrCat("shared cache '", url, "' does not start with redis://"));
  }
  std::vector<std::string> seeds;
  for (absl::string_view seed : absl::StrSplit(url.substr(kScheme.size()), ',')) {
    seed = absl::StripAsciiWhitespace(seed);
    std::string host;
    int port = 0;
    if (!ParseAddress(seed, &host, &port)) {
      return absl::InvalidArgumentError(absl::StrCat("shared cache '", url, "': seed '", seed,
                                                     "' is not host:port with a port in 1..65535"));
    }
    seeds.emplace_back(seed);
  }
  return seeds;
}

// One node's connection. Commands to the node take turns on it.
class RedisCluster::Node {
 public:
  Node(std::string address, std::string host, int port, RedisCluster* owner)
      : address_(std::move(address)), host_(std::move(host)), port_(port), owner_(owner) {}
  ~Node() {
    if (ctx_ != nullptr) redisFree(ctx_);
  }

  const std::string& address() const { return address_; }
  const std::string& host() const { return host_; }

  // Sends `commands` in one round trip and returns their replies (error replies included).
  // UNAVAILABLE when the node cannot be reached, does not answer in time, or is in backoff.
  absl::StatusOr<std::vector<RedisReply>> Run(
      const std::vector<const std::vector<absl::string_view>*>& commands) {
    MutexLock lock(&mu_);
    for (int attempt = 0;; ++attempt) {
      const bool reused = ctx_ != nullptr;
      if (!reused) {
        if (absl::Status s = ConnectLocked(); !s.ok()) return s;
      }
      for (const std::vector<absl::string_view>* argv : commands) {
        std::vector<const char*> args;
        std::vector<size_t> lens;
        for (absl::string_view a : *argv) {
          args.push_back(a.data());
          lens.push_back(a.size());
        }
        redisAppendCommandArgv(ctx_, static_cast<int>(args.size()), args.data(), lens.data());
      }
      std::vector<RedisReply> replies;
      bool failed = false;
      for (size_t i = 0; i < commands.size(); ++i) {
        void* r = nullptr;
        if (redisGetReply(ctx_, &r) != REDIS_OK || r == nullptr) {
          failed = true;
          break;
        }
        replies.push_back(Convert(static_cast<redisReply*>(r)));
        freeReplyObject(r);
      }
      if (!failed) return replies;
      const bool timed_out = ctx_->err == REDIS_ERR_IO && (errno == EAGAIN || errno == EWOULDBLOCK);
      std::string error = timed_out
                              ? absl::StrCat("no answer within ",
                                             absl::FormatDuration(owner_->options_.command_timeout))
                              : std::string(ctx_->errstr);
      redisFree(ctx_);
      ctx_ = nullptr;
      // A connection kept from earlier may have been closed under us (the node restarted):
      // one fresh connection is tried before the node is declared down. A timeout is not
      // retried; it would only double the wait.
      if (reused && !timed_out && attempt == 0) continue;
      RecordFailureLocked(error);
      return absl::UnavailableError(absl::StrCat("redis node ", address_, ": ", error));
    }
  }

 private:
  absl::Status ConnectLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    const absl::Time now = absl::Now();
    if (now < retry_at_) {
      return absl::UnavailableError(absl::StrCat(
          "redis node ", address_, " is unreachable (", last_error_, "); next attempt in ",
          absl::FormatDuration(absl::Trunc(retry_at_ - now, absl::Milliseconds(1)))));
    }
    const RedisClusterOptions& o = owner_->options_;
    redisContext* c =
        redisConnectWithTimeout(host_.c_str(), port_, AtLeastOneMs(o.connect_timeout));
    if (c == nullptr || c->err != 0) {
      std::string error = c == nullptr ? "out of memory" : c->errstr;
      if (c != nullptr) redisFree(c);
      RecordFailureLocked(absl::StrCat("cannot connect: ", error));
      return absl::UnavailableError(
          absl::StrCat("redis node ", address_, ": cannot connect: ", error));
    }
    redisSetTimeout(c, AtLeastOneMs(o.command_timeout));
    redisEnableKeepAlive(c);
    ctx_ = c;
    failures_ = 0;
    retry_at_ = absl::InfinitePast();
    owner_->connects_.fetch_add(1, std::memory_order_relaxed);
    return absl::OkStatus();
  }

  void RecordFailureLocked(std::string error) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    const RedisClusterOptions& o = owner_->options_;
    absl::Duration backoff = o.min_backoff;
    for (int i = 0; i < failures_ && backoff < o.max_backoff; ++i) backoff *= 2;
    ++failures_;
    retry_at_ = absl::Now() + std::min(backoff, o.max_backoff);
    last_error_ = std::move(error);
    owner_->connect_failures_.fetch_add(1, std::memory_order_relaxed);
  }

  const std::string address_;
  const std::string host_;
  const int port_;
  RedisCluster* const owner_;
  Mutex mu_;
  redisContext* ctx_ ABSL_GUARDED_BY(mu_) = nullptr;
  int failures_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Time retry_at_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  std::string last_error_ ABSL_GUARDED_BY(mu_);
};

absl::StatusOr<std::unique_ptr<RedisCluster>> RedisCluster::Create(RedisClusterOptions options) {
  if (options.seeds.empty()) return absl::InvalidArgumentError("redis cluster: no seed given");
  for (const std::string& seed : options.seeds) {
    std::string host;
    int port = 0;
    if (!ParseAddress(seed, &host, &port)) {
      return absl::InvalidArgumentError(absl::StrCat("redis cluster: seed '", seed,
                                                     "' is not host:port with a port in 1..65535"));
    }
  }
  if (options.max_redirects < 0) options.max_redirects = 0;
  return std::unique_ptr<RedisCluster>(new RedisCluster(std::move(options)));
}

RedisCluster::RedisCluster(RedisClusterOptions options)
    : options_(std::move(options)), slots_(kSlots, nullptr) {}

RedisCluster::~RedisCluster() = default;

RedisCluster::Node* RedisCluster::NodeFor(const std::string& address) {
  MutexLock lock(&mu_);
  std::unique_ptr<Node>& node = nodes_[address];
  if (node == nullptr) {
    std::string host;
    int port = 0;
    // An address Redis sent that does not parse gets port 0, which fails to connect with an
    // error naming it.
    if (!ParseAddress(address, &host, &port)) host = address;
    node = std::make_unique<Node>(address, host, port, this);
  }
  return node.get();
}

void RedisCluster::SetSlot(int slot, Node* node) {
  MutexLock lock(&mu_);
  slots_[slot] = node;
}

absl::StatusOr<RedisCluster::Node*> RedisCluster::NodeForSlot(int slot) {
  {
    MutexLock lock(&mu_);
    if (have_map_ && slots_[slot] != nullptr) return slots_[slot];
  }
  if (absl::Status s = Refresh(); !s.ok()) return s;
  MutexLock lock(&mu_);
  if (slots_[slot] == nullptr) {
    return absl::UnavailableError(absl::StrCat("redis cluster: no master serves slot ", slot));
  }
  return slots_[slot];
}

absl::Status RedisCluster::RefreshFrom(Node* node) {
  const std::vector<absl::string_view> argv = {"CLUSTER", "SLOTS"};
  absl::StatusOr<std::vector<RedisReply>> replies = node->Run({&argv});
  if (!replies.ok()) return replies.status();
  const RedisReply& r = replies->front();
  if (r.type == RedisReply::Type::kError) {
    if (absl::StrContains(r.str, "cluster support disabled")) {
      return absl::FailedPreconditionError(
          absl::StrCat("redis node ", node->address(), " is not a cluster node: ", r.str));
    }
    return absl::UnavailableError(
        absl::StrCat("redis node ", node->address(), " answered CLUSTER SLOTS: ", r.str));
  }
  auto malformed = [&] {
    return absl::InternalError(
        absl::StrCat("redis node ", node->address(), " sent a malformed CLUSTER SLOTS reply"));
  };
  if (r.type != RedisReply::Type::kArray) return malformed();
  std::vector<std::pair<std::pair<int64_t, int64_t>, std::string>> ranges;
  for (const RedisReply& range : r.elements) {
    if (range.type != RedisReply::Type::kArray || range.elements.size() < 3) return malformed();
    const RedisReply& master = range.elements[2];
    if (range.elements[0].type != RedisReply::Type::kInteger ||
        range.elements[1].type != RedisReply::Type::kInteger ||
        master.type != RedisReply::Type::kArray || master.elements.size() < 2 ||
        master.elements[1].type != RedisReply::Type::kInteger) {
      return malformed();
    }
    const int64_t first = range.elements[0].integer, last = range.elements[1].integer;
    if (first < 0 || last >= kSlots || first > last) return malformed();
    // An empty or "?" endpoint means "the address you reached me at".
    std::string host = master.elements[0].str;
    if (host.empty() || host == "?") host = node->host();
    const std::string address = host.find(':') != std::string::npos
                                    ? absl::StrCat("[", host, "]:", master.elements[1].integer)
                                    : absl::StrCat(host, ":", master.elements[1].integer);
    ranges.push_back({{first, last}, address});
  }
  if (ranges.empty()) {
    return absl::UnavailableError(
        absl::StrCat("redis node ", node->address(), " knows of no slot served"));
  }
  std::vector<Node*> masters;
  for (const auto& [range, address] : ranges) masters.push_back(NodeFor(address));
  MutexLock lock(&mu_);
  std::fill(slots_.begin(), slots_.end(), nullptr);
  for (size_t i = 0; i < ranges.size(); ++i) {
    for (int64_t s = ranges[i].first.first; s <= ranges[i].first.second; ++s) {
      slots_[s] = masters[i];
    }
  }
  have_map_ = true;
  return absl::OkStatus();
}

absl::Status RedisCluster::Refresh() {
  MutexLock refresh(&refresh_mu_);
  refreshes_.fetch_add(1, std::memory_order_relaxed);
  std::vector<std::string> candidates = Masters();
  for (const std::string& seed : options_.seeds) {
    if (std::find(candidates.begin(), candidates.end(), seed) == candidates.end()) {
      candidates.push_back(seed);
    }
  }
  {
    MutexLock lock(&mu_);
    last_refresh_ = absl::Now();
  }
  std::vector<std::string> errors;
  bool all_not_cluster = true;
  for (const std::string& address : candidates) {
    absl::Status s = RefreshFrom(NodeFor(address));
    if (s.ok()) return s;
    all_not_cluster = all_not_cluster && absl::IsFailedPrecondition(s);
    errors.emplace_back(s.message());
  }
  const std::string message =
      absl::StrCat("redis cluster: no seed or known node could give the slot map: ",
                   absl::StrJoin(errors, "; "));
  return all_not_cluster ? absl::FailedPreconditionError(message) : absl::UnavailableError(message);
}

void RedisCluster::MaybeRefreshAfterFailure() {
  {
    MutexLock lock(&mu_);
    if (absl::Now() - last_refresh_ < absl::Seconds(1)) return;
  }
  Refresh().IgnoreError();  // the command's own error is what the caller hears
}

absl::StatusOr<RedisReply> RedisCluster::Command(absl::string_view key,
                                                 const std::vector<absl::string_view>& argv) {
  static const std::vector<absl::string_view> kAsking = {"ASKING"};
  const int slot = RedisKeySlot(key);
  absl::StatusOr<Node*> node = NodeForSlot(slot);
  if (!node.ok()) return node.status();
  bool asking = false;
  std::string last_redirect;
  for (int hop = 0;; ++hop) {
    absl::StatusOr<std::vector<RedisReply>> replies =
        asking ? (*node)->Run({&kAsking, &argv}) : (*node)->Run({&argv});
    if (!replies.ok()) {
      MaybeRefreshAfterFailure();
      return replies.status();
    }
    RedisReply& reply = replies->back();
    if (reply.type != RedisReply::Type::kError) return std::move(reply);
    const std::string& error = reply.str;
    const bool moved = absl::StartsWith(error, "MOVED ");
    const bool ask = absl::StartsWith(error, "ASK ");
    const bool try_again = absl::StartsWith(error, "TRYAGAIN");
    if (!moved && !ask && !try_again) {
      if (IsUnavailableError(error)) {
        return absl::UnavailableError(absl::StrCat("redis node ", (*node)->address(), ": ", error));
      }
      return absl::InternalError(absl::StrCat("redis node ", (*node)->address(), " answered ",
                                              CommandName(argv), ": ", error));
    }
    if (hop >= options_.max_redirects) {
      return absl::UnavailableError(absl::StrCat("redis cluster: ", CommandName(argv), " on slot ",
                                                 slot, " still redirected after ", hop,
                                                 " hops (last: ", error, ")"));
    }
    if (try_again) {
      absl::SleepFor(absl::Milliseconds(10) * (hop + 1));
      asking = false;
      node = NodeForSlot(slot);
      if (!node.ok()) return node.status();
      continue;
    }
    // "MOVED <slot> <host:port>" / "ASK <slot> <host:port>"; an empty host is the one asked.
    std::vector<absl::string_view> parts = absl::StrSplit(error, ' ', absl::SkipEmpty());
    if (parts.size() < 3) {
      return absl::InternalError(absl::StrCat("redis node ", (*node)->address(),
                                              " sent a malformed redirection: ", error));
    }
    std::string target(parts[2]);
    if (absl::StartsWith(target, ":")) target = absl::StrCat((*node)->host(), target);
    Node* next = NodeFor(target);
    if (moved) {
      moved_.fetch_add(1, std::memory_order_relaxed);
      SetSlot(slot, next);
      // One slot moved usually means more did: learn the whole map (the next commands use it).
      Refresh().IgnoreError();
      SetSlot(slot, next);
      asking = false;
    } else {
      asked_.fetch_add(1, std::memory_order_relaxed);
      asking = true;
    }
    node = next;
  }
}

absl::StatusOr<std::optional<std::string>> RedisCluster::Get(absl::string_view key) {
  absl::StatusOr<RedisReply> r = Command(key, {"GET", key});
  if (!r.ok()) return r.status();
  if (r->type == RedisReply::Type::kNil) return std::nullopt;
  if (r->type != RedisReply::Type::kString) {
    return absl::InternalError(absl::StrCat("redis cluster: GET answered a non-string reply"));
  }
  return std::move(r->str);
}

absl::StatusOr<bool> RedisCluster::Set(absl::string_view key, absl::string_view value,
                                       const SetOptions& options) {
  std::vector<absl::string_view> argv = {"SET", key, value};
  std::string ms;
  if (options.expire.has_value()) {
    ms = absl::StrCat(std::max<int64_t>(1, absl::ToInt64Milliseconds(*options.expire)));
    argv.push_back("PX");
    argv.push_back(ms);
  }
  if (options.only_if_absent) argv.push_back("NX");
  absl::StatusOr<RedisReply> r = Command(key, argv);
  if (!r.ok()) return r.status();
  if (r->type == RedisReply::Type::kNil) return false;
  if (r->type != RedisReply::Type::kStatus) {
    return absl::InternalError("redis cluster: SET answered neither OK nor nil");
  }
  return true;
}

absl::StatusOr<bool> RedisCluster::Del(absl::string_view key) {
  absl::StatusOr<RedisReply> r = Command(key, {"DEL", key});
  if (!r.ok()) return r.status();
  if (r->type != RedisReply::Type::kInteger) {
    return absl::InternalError("redis cluster: DEL answered a non-integer reply");
  }
  return r->integer > 0;
}

std::string RedisCluster::MasterForSlot(int slot) {
  if (slot < 0 || slot >= kSlots) return "";
  MutexLock lock(&mu_);
  return slots_[slot] == nullptr ? "" : slots_[slot]->address();
}

std::vector<std::string> RedisCluster::Masters() {
  std::vector<std::string> out;
  {
    MutexLock lock(&mu_);
    for (Node* n : slots_) {
      if (n != nullptr && (out.empty() || out.back() != n->address())) out.push_back(n->address());
    }
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

RedisCluster::Counters RedisCluster::counters() const {
  Counters c;
  c.moved = moved_.load(std::memory_order_relaxed);
  c.asked = asked_.load(std::memory_order_relaxed);
  c.refreshes = refreshes_.load(std::memory_order_relaxed);
  c.connects = connects_.load(std::memory_order_relaxed);
  c.connect_failures = connect_failures_.load(std::memory_order_relaxed);
  return c;
}

}  // namespace kiln::cache
