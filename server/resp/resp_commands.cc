#include "server/resp/resp_commands.h"

#include <array>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "cache/errors.h"
#include "kiln/version.h"
#include "proto/base/digest.h"

namespace kiln::server {
namespace {

// The commands counted by name; any other counts as "other".
constexpr std::array<absl::string_view, 13> kCommands = {
    "get",  "set",  "exists", "del",    "ping",  "echo",    "auth",
    "info", "quit", "client", "select", "hello", "protocol"};
constexpr size_t kOther = kCommands.size();

enum Outcome { kOk, kHit, kMiss, kError, kUnauthenticated, kDenied, kOutcomes };
constexpr std::array<absl::string_view, kOutcomes> kOutcomeNames = {
    "ok", "hit", "miss", "error", "unauthenticated", "denied"};

size_t CommandIndex(absl::string_view lower_name) {
  for (size_t i = 0; i < kCommands.size(); ++i) {
    if (kCommands[i] == lower_name) return i;
  }
  return kOther;
}

RespReply WrongArity(absl::string_view lower_name) {
  // redis-py recognises this wording for AUTH (and retries AUTH USER PASS as AUTH PASS).
  return RespReply::Error(
      absl::StrCat("ERR wrong number of arguments for '", lower_name, "' command"));
}

RespReply StatusError(const absl::Status& status) {
  return RespReply::Error(absl::StrCat("ERR ", status.message()));
}

Outcome OutcomeOf(const RespReply& reply) {
  return !reply.head.empty() && reply.head[0] == '-' ? kError : kOk;
}

}  // namespace

class RespCommands::Counts {
 public:
  explicit Counts(MetricsRegistry& registry) {
    Family<Counter>& family = registry.AddCounter(
        "kiln_resp_commands_total",
        "Commands to the RESP front, by command and outcome (ok, hit, miss, error, "
        "unauthenticated, denied); command \"protocol\" counts connections closed on a "
        "protocol error.",
        {"command", "outcome"});
    for (size_t c = 0; c <= kCommands.size(); ++c) {
      for (size_t o = 0; o < kOutcomes; ++o) {
        counters_[c][o] = &family.With(
            {std::string(c == kOther ? "other" : kCommands[c]), std::string(kOutcomeNames[o])});
      }
    }
  }
  void Count(size_t command, Outcome outcome) { counters_[command][outcome]->Increment(); }

 private:
  std::array<std::array<Counter*, kOutcomes>, kCommands.size() + 1> counters_;
};

std::string RespCompileKey(absl::string_view key) { return absl::StrCat("resp:", Sha256Hex(key)); }

RespCommands::RespCommands(cache::Cache* cache, const Authorizer* authorizer,
                           MetricsRegistry* metrics, SharedCache* shared)
    : cache_(cache), authorizer_(authorizer), shared_(shared) {
  if (metrics != nullptr) counts_ = std::make_unique<Counts>(*metrics);
}

RespCommands::~RespCommands() = default;

RespSession RespCommands::NewSession() const {
  RespSession session;
  if (!authorizer_->enabled()) session.identity = Identity{"", Role::kAdmin};
  return session;
}

void RespCommands::CountProtocolError() {
  if (counts_ != nullptr) counts_->Count(CommandIndex("protocol"), kError);
}

RespAction RespCommands::Handle(RespSession& session, std::vector<std::string> args) {
  const std::string name = absl::AsciiStrToLower(args[0]);
  const size_t index = CommandIndex(name);
  const size_t argc = args.size();
  auto count = [this, index](Outcome outcome) {
    if (counts_ != nullptr) counts_->Count(index, outcome);
  };
  auto answer = [&](RespReply reply, Outcome outcome) {
    count(outcome);
    return RespAction{std::move(reply), nullptr};
  };
  auto answer_plain = [&](RespReply reply) {
    const Outcome outcome = OutcomeOf(reply);
    return answer(std::move(reply), outcome);
  };

  // Commands that need no authentication.
  if (name == "ping") {
    if (argc > 2) return answer_plain(WrongArity(name));
    return answer_plain(argc == 2 ? RespReply::Bulk(args[1]) : RespReply::Simple("PONG"));
  }
  if (name == "echo") {
    if (argc != 2) return answer_plain(WrongArity(name));
    return answer_plain(RespReply::Bulk(args[1]));
  }
  if (name == "quit") {
    RespReply reply = RespReply::Simple("OK");
    reply.close = true;
    return answer_plain(std::move(reply));
  }
  if (name == "hello") {
    // Clients that try RESP3 first fall back to RESP2 on this error (Redis's own wording).
    return answer_plain(
        RespReply::Error("NOPROTO sorry, this protocol version is not supported (kilnd speaks "
                         "RESP2 only)"));
  }
  if (name == "auth") {
    if (argc != 2 && argc != 3) return answer_plain(WrongArity(name));
    if (!authorizer_->enabled()) {
      return answer_plain(RespReply::Error(
          "ERR Client sent AUTH, but no password is set (kilnd has no --token-file)"));
    }
    const std::string header = absl::StrCat("Bearer ", args[argc - 1]);
    const absl::string_view header_view = header;
    absl::StatusOr<Identity> identity = authorizer_->IdentifyHeader(&header_view);
    if (!identity.ok()) {
      return answer(RespReply::Error("WRONGPASS invalid username-password pair or user is "
                                     "disabled (unknown token)"),
                    kUnauthenticated);
    }
    session.identity = *std::move(identity);
    return answer_plain(RespReply::Simple("OK"));
  }

  if (!session.identity.has_value()) {
    return answer(RespReply::Error("NOAUTH Authentication required (AUTH TOKEN: kilnd has a "
                                   "--token-file)"),
                  kUnauthenticated);
  }
  auto permitted = [&](Role needed) {
    return static_cast<int>(session.identity->role) >= static_cast<int>(needed);
  };
  auto denied = [&](Role needed) {
    return answer(
        RespReply::Error(absl::StrCat("NOPERM the token of ", session.identity->name, " has role ",
                                      RoleName(session.identity->role), "; ",
                                      absl::AsciiStrToUpper(name), " needs ", RoleName(needed))),
        kDenied);
  };

  if (name == "get") {
    if (argc != 2) return answer_plain(WrongArity(name));
    if (!permitted(Role::kRead)) return denied(Role::kRead);
    return RespAction{
        RespReply(), [this, count, key = std::move(args[1])]() mutable {
          RespReply reply = Get(key);
          count(reply.head == "$-1\r\n" ? kMiss : OutcomeOf(reply) == kOk ? kHit : kError);
          return reply;
        }};
  }
  if (name == "set") {
    if (argc < 3) return answer_plain(WrongArity(name));
    if (argc > 3) {
      return answer_plain(RespReply::Error(absl::StrCat(
          "ERR kilnd's SET takes no options (got '", args[3],
          "'): values never expire and are never set conditionally; the cache's byte budget "
          "evicts them")));
    }
    if (!permitted(Role::kCompile)) return denied(Role::kCompile);
    return RespAction{
        RespReply(), [this, count, key = std::move(args[1]), value = std::move(args[2])]() mutable {
          RespReply reply = Set(key, value);
          count(OutcomeOf(reply));
          return reply;
        }};
  }
  if (name == "exists") {
    if (argc < 2) return answer_plain(WrongArity(name));
    if (!permitted(Role::kRead)) return denied(Role::kRead);
    args.erase(args.begin());
    return RespAction{RespReply(), [this, count, keys = std::move(args)]() mutable {
                        RespReply reply = Exists(keys);
                        count(OutcomeOf(reply));
                        return reply;
                      }};
  }
  if (name == "del") {
    return answer_plain(RespReply::Error(
        "ERR kilnd does not delete keys: values are immutable (SET replaces one) and the "
        "cache's byte budget evicts them"));
  }
  if (name == "info") {
    if (!permitted(Role::kRead)) return denied(Role::kRead);
    return answer_plain(Info());
  }
  if (name == "select") {
    if (argc != 2) return answer_plain(WrongArity(name));
    if (args[1] != "0") {
      return answer_plain(RespReply::Error("ERR DB index is out of range (kilnd has db 0 only)"));
    }
    return answer_plain(RespReply::Simple("OK"));
  }
  if (name == "client") {
    const std::string sub = argc >= 2 ? absl::AsciiStrToLower(args[1]) : "";
    if (sub == "setname" || sub == "setinfo") return answer_plain(RespReply::Simple("OK"));
    return answer_plain(RespReply::Error(
        absl::StrCat("ERR kilnd answers CLIENT SETNAME and CLIENT SETINFO only, not CLIENT ",
                     argc >= 2 ? args[1] : "without a subcommand")));
  }
  std::string shown = args[0].substr(0, 128);
  for (char& c : shown) {
    if (!absl::ascii_isprint(static_cast<unsigned char>(c))) c = '?';
  }
  return answer_plain(RespReply::Error(absl::StrCat(
      "ERR unknown command '", shown,
      "' (kilnd answers GET, SET, EXISTS, PING, ECHO, AUTH, INFO, SELECT 0, CLIENT SETNAME, "
      "CLIENT SETINFO, QUIT)")));
}

absl::StatusOr<cache::BlobBytes> RespCommands::ReadLocal(const std::string& compile_key,
                                                         v1::ActionVariant* variant) {
  absl::StatusOr<v1::ActionEntry> entry = cache_->actions().Get(compile_key);
  if (!entry.ok()) return entry.status();
  *variant = entry->variants(0);
  // Absent when evicted since, or dropped as corrupt (counted as an integrity failure).
  return cache_->store().Read(variant->artifacts(0));
}

bool RespCommands::ReadThrough(const std::string& compile_key) {
  return shared_ != nullptr && shared_->up() && shared_->FetchAction(compile_key);
}

RespReply RespCommands::Get(const std::string& key) {
  cache::ActionCache& actions = cache_->actions();
  const std::string compile_key = RespCompileKey(key);
  v1::ActionVariant variant;
  absl::StatusOr<cache::BlobBytes> bytes = ReadLocal(compile_key, &variant);
  if (absl::IsNotFound(bytes.status()) && ReadThrough(compile_key)) {
    bytes = ReadLocal(compile_key, &variant);
  }
  if (absl::IsNotFound(bytes.status())) {
    actions.RecordMiss();
    return RespReply::Nil();
  }
  if (!bytes.ok()) return StatusError(bytes.status());
  actions.RecordHit(compile_key, variant.guards());
  return RespReply::Bulk(*std::move(bytes));
}

RespReply RespCommands::Set(const std::string& key, const std::string& value) {
  const v1::Digest digest = DigestOf(value);
  v1::ActionVariant variant;
  *variant.add_artifacts() = digest;
  const std::string compile_key = RespCompileKey(key);
  absl::Status put;
  // The blob may be evicted between its Put and the entry's (nothing references it yet):
  // then the entry is refused and both are written again.
  for (int attempt = 0; attempt < 3; ++attempt) {
    absl::StatusOr<bool> stored = cache_->store().Put(digest, value);
    if (!stored.ok()) return StatusError(stored.status());
    put = cache_->actions().Put(compile_key, variant);
    if (!absl::IsFailedPrecondition(put)) break;
  }
  if (!put.ok()) return StatusError(put);
  // The entry and its blob, as gRPC PutAction writes them through.
  if (shared_ != nullptr) shared_->WriteAction(compile_key);
  return RespReply::Simple("OK");
}

RespReply RespCommands::Exists(const std::vector<std::string>& keys) {
  int64_t found = 0;
  for (const std::string& key : keys) {
    const std::string compile_key = RespCompileKey(key);
    absl::StatusOr<v1::ActionEntry> entry = cache_->actions().Get(compile_key);
    if (absl::IsNotFound(entry.status()) && ReadThrough(compile_key)) {
      entry = cache_->actions().Get(compile_key);
    }
    if (entry.ok()) {
      ++found;
    } else if (!absl::IsNotFound(entry.status())) {
      return StatusError(entry.status());
    }
  }
  return RespReply::Integer(found);
}

RespReply RespCommands::Info() {
  const cache::CacheStatistics s = cache_->Statistics();
  return RespReply::Bulk(absl::StrCat(
      "# Server\r\n", "kiln_version:", kKilnVersion, "\r\n",
      "redis_mode:standalone\r\n",  // what kilnd is to a Redis client; no cluster commands
      "resp_protocol:2\r\n", "\r\n# Keyspace\r\n",
      // RESP keys and compile keys share the action cache: `keys` counts both.
      "db0:keys=", s.actions, ",expires=0\r\n", "\r\n# Kiln cache\r\n", "blobs:", s.blobs, "\r\n",
      "stored_bytes:", s.stored_bytes(), "\r\n", "budget_bytes:", s.budget_bytes, "\r\n",
      "hits:", s.hits, "\r\n", "misses:", s.misses, "\r\n", "evictions:", s.evictions, "\r\n",
      "integrity_failures:", s.integrity_failures, "\r\n"));
}

}  // namespace kiln::server
