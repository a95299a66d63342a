#pragma once

// What kilnd's RESP front answers, and how it is written (RESP2). A reply is its encoded
// bytes, optionally followed by a bulk string's contents shared with their owner (a value the
// store keeps in memory goes out without a copy), and whether the connection closes after it.

#include <cstdint>
#include <memory>
#include <string>

#include "absl/strings/string_view.h"

namespace kiln::server {

struct RespReply {
  std::string head;  // the encoded reply; with `bulk`, the `$LEN\r\n` before it
  // The contents of a bulk string, followed on the wire by CRLF; null: none.
  std::shared_ptr<const std::string> bulk;
  bool close = false;

  // +TEXT (no CR or LF in it).
  static RespReply Simple(absl::string_view text);
  // -MESSAGE: `message` starts with its code ("ERR ...", "NOAUTH ..."); CR and LF in it
  // become spaces.
  static RespReply Error(absl::string_view message);
  static RespReply Integer(int64_t value);
  // $LEN\r\nBYTES\r\n, copying the bytes.
  static RespReply Bulk(absl::string_view bytes);
  // The same, sharing them.
  static RespReply Bulk(std::shared_ptr<const std::string> bytes);
  // $-1: the nil bulk string.
  static RespReply Nil();

  // The whole reply as bytes (head, bulk and its CRLF), for tests and small replies.
  std::string Encoded() const;
};

}  // namespace kiln::server
