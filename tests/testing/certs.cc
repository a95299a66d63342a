#include "tests/testing/certs.h"

#include <fstream>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "tests/testing/subprocess.h"

namespace kiln::testing {
namespace {

absl::Status Openssl(const std::vector<std::string>& args) {
  std::vector<std::string> argv = {"/usr/bin/openssl"};
  argv.insert(argv.end(), args.begin(), args.end());
  absl::StatusOr<RunResult> r = Run(argv);
  if (!r.ok()) return r.status();
  if (r->exit_code != 0) {
    return absl::InternalError(absl::StrCat("openssl ", args[0], " failed: ", r->err));
  }
  return absl::OkStatus();
}

absl::Status MakeCa(const std::string& dir, const std::string& name) {
  return Openssl({"req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
                  "-days", "2", "-subj", "/CN=" + name, "-keyout", dir + "/" + name + ".key",
                  "-out", dir + "/" + name + ".pem"});
}

absl::Status MakeLeaf(const std::string& dir, const std::string& name, const std::string& cn,
                      const std::string& ext) {
  const std::string key = dir + "/" + name + ".key";
  const std::string csr = dir + "/" + name + ".csr";
  const std::string ext_file = dir + "/" + name + ".ext";
  std::ofstream(ext_file) << ext << "\n";
  if (absl::Status s = Openssl({"req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256",
                                "-nodes", "-subj", "/CN=" + cn, "-keyout", key, "-out", csr});
      !s.ok()) {
    return s;
  }
  return Openssl({"x509", "-req", "-in", csr, "-CA", dir + "/ca.pem", "-CAkey", dir + "/ca.key",
                  "-CAcreateserial", "-days", "2", "-extfile", ext_file, "-out",
                  dir + "/" + name + ".pem"});
}

}  // namespace

absl::StatusOr<TestPki> MakeTestPki(const std::string& dir) {
  if (absl::Status s = MakeCa(dir, "ca"); !s.ok()) return s;
  if (absl::Status s = MakeCa(dir, "other-ca"); !s.ok()) return s;
  if (absl::Status s = MakeLeaf(dir, "server", "kilnd",
                                "subjectAltName=IP:127.0.0.1,DNS:localhost\n"
                                "extendedKeyUsage=serverAuth");
      !s.ok()) {
    return s;
  }
  if (absl::Status s = MakeLeaf(dir, "client", "trainer-7", "extendedKeyUsage=clientAuth");
      !s.ok()) {
    return s;
  }
  return TestPki{dir + "/ca.pem",     dir + "/server.pem", dir + "/server.key",
                 dir + "/client.pem", dir + "/client.key", dir + "/other-ca.pem"};
}

}  // namespace kiln::testing
