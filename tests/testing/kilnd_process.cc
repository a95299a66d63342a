#include "tests/testing/kilnd_process.h"

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"
#include "tests/testing/test_env.h"

namespace kiln::testing {

absl::StatusOr<KilndProcess> KilndProcess::Start(const std::string& data_dir,
                                                 const std::vector<std::string>& extra_flags,
                                                 const std::string& listen) {
  std::vector<std::string> argv = {KilndPath(),   "--listen",   listen,  "--metrics-listen",
                                   "127.0.0.1:0", "--data-dir", data_dir};
  argv.insert(argv.end(), extra_flags.begin(), extra_flags.end());
  absl::StatusOr<Subprocess> p = Subprocess::Start(argv);
  if (!p.ok()) return p.status();
  std::optional<std::string> line =
      p->WaitForStderrLine("\"event\":\"serving\"", absl::Seconds(30));
  if (!line.has_value()) {
    p->Wait(absl::Seconds(2));
    return absl::UnavailableError(absl::StrCat("kilnd did not start: ", p->Stderr()));
  }
  nlohmann::json j = nlohmann::json::parse(*line);
  return KilndProcess(*std::move(p), j["grpc_port"].get<int>(), j["http_port"].get<int>(),
                      j.value("blob_port", 0), j.value("resp_port", 0));
}

}  // namespace kiln::testing
