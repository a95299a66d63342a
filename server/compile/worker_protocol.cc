#include "server/compile/worker_protocol.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include "absl/base/internal/endian.h"
#include "absl/strings/str_cat.h"

namespace kiln::server::worker {
namespace {

// Payload fields: u32/i64 little-endian integers and u32-length-prefixed byte strings.
class Writer {
 public:
  Writer& U32(uint32_t v) {
    char b[4];
    absl::little_endian::Store32(b, v);
    out_.append(b, 4);
    return *this;
  }
  Writer& I64(int64_t v) {
    char b[8];
    absl::little_endian::Store64(b, static_cast<uint64_t>(v));
    out_.append(b, 8);
    return *this;
  }
  Writer& Bytes(absl::string_view s) {
    U32(static_cast<uint32_t>(s.size()));
    out_.append(s.data(), s.size());
    return *this;
  }
  std::string Take() { return std::move(out_); }

 private:
  std::string out_;
};

class Reader {
 public:
  Reader(absl::string_view in, absl::string_view what) : in_(in), what_(what) {}
  bool U32(uint32_t* v) {
    if (!Need(4)) return false;
    *v = absl::little_endian::Load32(in_.data());
    in_.remove_prefix(4);
    return true;
  }
  bool I64(int64_t* v) {
    if (!Need(8)) return false;
    *v = static_cast<int64_t>(absl::little_endian::Load64(in_.data()));
    in_.remove_prefix(8);
    return true;
  }
  bool Bytes(std::string* s) {
    uint32_t n = 0;
    if (!U32(&n) || !Need(n)) return false;
    s->assign(in_.data(), n);
    in_.remove_prefix(n);
    return true;
  }
  // OK when every field was read and nothing is left over.
  absl::Status Done(bool read) const {
    if (!read) return absl::DataLossError(absl::StrCat("truncated ", what_, " message"));
    if (!in_.empty()) {
      return absl::DataLossError(
          absl::StrCat(in_.size(), " unexpected bytes after a ", what_, " message"));
    }
    return absl::OkStatus();
  }

 private:
  bool Need(size_t n) const { return in_.size() >= n; }
  absl::string_view in_;
  absl::string_view what_;
};

bool KnownType(uint8_t type) {
  return type >= static_cast<uint8_t>(FrameType::kReady) &&
         type <= static_cast<uint8_t>(FrameType::kOutOfMemory);
}

}  // namespace

std::string EncodeFrame(FrameType type, absl::string_view payload) {
  std::string out(kHeaderBytes, '\0');
  absl::little_endian::Store32(out.data(), static_cast<uint32_t>(payload.size() + 1));
  out[4] = static_cast<char>(type);
  out.append(payload.data(), payload.size());
  return out;
}

absl::StatusOr<std::optional<Frame>> FrameReader::Next() {
  const absl::string_view rest = absl::string_view(buffer_).substr(consumed_);
  if (rest.size() < kHeaderBytes) return std::nullopt;
  const uint32_t length = absl::little_endian::Load32(rest.data());
  const uint8_t type = static_cast<uint8_t>(rest[4]);
  if (length == 0 || length > kMaxFrameBytes) {
    return absl::DataLossError(
        absl::StrCat("a frame of ", length, " bytes (at most ", kMaxFrameBytes, ", at least 1)"));
  }
  if (!KnownType(type)) {
    return absl::DataLossError(absl::StrCat("a frame of unknown type ", type));
  }
  if (rest.size() - 4 < length) return std::nullopt;
  Frame frame{static_cast<FrameType>(type), std::string(rest.substr(kHeaderBytes, length - 1))};
  consumed_ += 4 + length;
  // Drop what was consumed once it is most of the buffer, so appends stay amortized O(1).
  if (consumed_ > buffer_.size() / 2) {
    buffer_.erase(0, consumed_);
    consumed_ = 0;
  }
  return frame;
}

absl::Status WriteAll(int fd, absl::string_view bytes) {
  while (!bytes.empty()) {
    const ssize_t n = ::write(fd, bytes.data(), bytes.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      return absl::UnavailableError(absl::StrCat("write to the compile socket: ", strerror(errno)));
    }
    bytes.remove_prefix(static_cast<size_t>(n));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::optional<Frame>> ReadFrame(int fd) {
  // Exactly one frame: whatever follows it stays in the socket for the next call.
  auto read_exactly = [fd](char* out, size_t n) -> absl::StatusOr<size_t> {
    size_t got = 0;
    while (got < n) {
      const ssize_t r = ::read(fd, out + got, n - got);
      if (r < 0) {
        if (errno == EINTR) continue;
        return absl::UnavailableError(
            absl::StrCat("read from the compile socket: ", strerror(errno)));
      }
      if (r == 0) break;
      got += static_cast<size_t>(r);
    }
    return got;
  };
  char header[kHeaderBytes];
  absl::StatusOr<size_t> got = read_exactly(header, kHeaderBytes);
  if (!got.ok()) return got.status();
  if (*got == 0) return std::nullopt;
  if (*got < kHeaderBytes) {
    return absl::DataLossError("the compile socket closed in the middle of a frame");
  }
  FrameReader reader;
  reader.Append(absl::string_view(header, kHeaderBytes));
  // Validates the header before its length is trusted.
  absl::StatusOr<std::optional<Frame>> frame = reader.Next();
  if (!frame.ok() || frame->has_value()) return frame;
  const uint32_t length = absl::little_endian::Load32(header);
  std::string payload(length - 1, '\0');
  got = read_exactly(payload.data(), payload.size());
  if (!got.ok()) return got.status();
  if (*got < payload.size()) {
    return absl::DataLossError("the compile socket closed in the middle of a frame");
  }
  return Frame{static_cast<FrameType>(header[4]), std::move(payload)};
}

std::string EncodeCompileRequest(const CompileRequest& request) {
  return Writer().Bytes(request.graph).Bytes(request.options).Bytes(request.compile_key).Take();
}

absl::StatusOr<CompileRequest> DecodeCompileRequest(absl::string_view payload) {
  CompileRequest request;
  Reader r(payload, "compile request");
  const bool read =
      r.Bytes(&request.graph) && r.Bytes(&request.options) && r.Bytes(&request.compile_key);
  if (absl::Status s = r.Done(read); !s.ok()) return s;
  return request;
}

std::string EncodeReady(const Ready& ready) {
  return Writer().U32(ready.protocol_version).I64(ready.pid).Take();
}

absl::StatusOr<Ready> DecodeReady(absl::string_view payload) {
  Ready ready;
  Reader r(payload, "ready");
  const bool read = r.U32(&ready.protocol_version) && r.I64(&ready.pid);
  if (absl::Status s = r.Done(read); !s.ok()) return s;
  return ready;
}

std::string EncodePhase(const Phase& phase) {
  return Writer()
      .Bytes(phase.name)
      .I64(absl::ToUnixMicros(phase.start))
      .I64(absl::ToUnixMicros(phase.end))
      .Take();
}

absl::StatusOr<Phase> DecodePhase(absl::string_view payload) {
  Phase phase;
  int64_t start = 0, end = 0;
  Reader r(payload, "phase");
  const bool read = r.Bytes(&phase.name) && r.I64(&start) && r.I64(&end);
  if (absl::Status s = r.Done(read); !s.ok()) return s;
  if (end < start) return absl::DataLossError("a phase that ends before it starts");
  phase.start = absl::FromUnixMicros(start);
  phase.end = absl::FromUnixMicros(end);
  return phase;
}

std::string EncodeError(const absl::Status& status) {
  std::vector<std::pair<std::string, std::string>> payloads;
  status.ForEachPayload([&](absl::string_view url, const absl::Cord& p) {
    payloads.emplace_back(std::string(url), std::string(p));
  });
  Writer w;
  w.U32(static_cast<uint32_t>(status.code())).Bytes(status.message());
  w.U32(static_cast<uint32_t>(payloads.size()));
  for (const auto& [url, p] : payloads) w.Bytes(url).Bytes(p);
  return w.Take();
}

absl::Status DecodeError(absl::string_view payload, absl::Status* error) {
  uint32_t code = 0, count = 0;
  std::string message;
  Reader r(payload, "error");
  bool read = r.U32(&code) && r.Bytes(&message) && r.U32(&count);
  std::vector<std::pair<std::string, std::string>> payloads;
  for (uint32_t i = 0; read && i < count; ++i) {
    std::string url, p;
    read = r.Bytes(&url) && r.Bytes(&p);
    payloads.emplace_back(std::move(url), std::move(p));
  }
  if (absl::Status s = r.Done(read); !s.ok()) return s;
  if (code == 0 || code > static_cast<uint32_t>(absl::StatusCode::kUnauthenticated)) {
    return absl::DataLossError(absl::StrCat("an error with status code ", code));
  }
  absl::Status status(static_cast<absl::StatusCode>(code), message);
  for (const auto& [url, p] : payloads) status.SetPayload(url, absl::Cord(p));
  *error = std::move(status);
  return absl::OkStatus();
}

}  // namespace kiln::server::worker
