#pragma once

// A throw-away PKI for TLS tests, made with the openssl command: a CA, a server certificate
// for 127.0.0.1/localhost and a client certificate (CN "trainer-7"), all signed by the CA.

#include <string>

#include "absl/status/statusor.h"

namespace kiln::testing {

struct TestPki {
  std::string ca_cert;  // paths to PEM files
  std::string server_cert;
  std::string server_key;
  std::string client_cert;
  std::string client_key;
  std::string other_ca_cert;  // a CA that signed nothing here
};

absl::StatusOr<TestPki> MakeTestPki(const std::string& dir);

}  // namespace kiln::testing
