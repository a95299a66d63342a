#include "server/resp/resp_reply.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace kiln::server {

RespReply RespReply::Simple(absl::string_view text) {
  RespReply reply;
  reply.head = absl::StrCat("+", text, "\r\n");
  return reply;
}

RespReply RespReply::Error(absl::string_view message) {
  RespReply reply;
  reply.head = absl::StrCat("-", message, "\r\n");
  for (size_t i = 1; i + 2 < reply.head.size(); ++i) {
    if (reply.head[i] == '\r' || reply.head[i] == '\n') reply.head[i] = ' ';
  }
  return reply;
}

RespReply RespReply::Integer(int64_t value) {
  RespReply reply;
  reply.head = absl::StrCat(":", value, "\r\n");
  return reply;
}

RespReply RespReply::Bulk(absl::string_view bytes) {
  RespReply reply;
  reply.head = absl::StrCat("$", bytes.size(), "\r\n", bytes, "\r\n");
  return reply;
}

RespReply RespReply::Bulk(std::shared_ptr<const std::string> bytes) {
  RespReply reply;
  reply.head = absl::StrCat("$", bytes->size(), "\r\n");
  reply.bulk = std::move(bytes);
  return reply;
}

RespReply RespReply::Nil() {
  RespReply reply;
  reply.head = "$-1\r\n";
  return reply;
}

std::string RespReply::Encoded() const {
  if (bulk == nullptr) return head;
  return absl::StrCat(head, *bulk, "\r\n");
}

}  // namespace kiln::server
