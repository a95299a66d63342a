#include "tests/testing/scrape.h"

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "httplib.h"

namespace kiln::testing {

double MetricValue(absl::string_view exposition, const std::string& series) {
  for (absl::string_view line : absl::StrSplit(exposition, '\n')) {
    if (line.size() > series.size() + 1 && line.substr(0, series.size()) == series &&
        line[series.size()] == ' ') {
      double v = 0;
      if (absl::SimpleAtod(line.substr(series.size() + 1), &v)) return v;
    }
  }
  return 0.0;
}

absl::StatusOr<double> ScrapeMetric(int http_port, const std::string& series) {
  absl::StatusOr<std::string> page = FetchPage(http_port, "/metrics");
  if (!page.ok()) return page.status();
  return MetricValue(*page, series);
}

absl::StatusOr<std::string> FetchPage(int http_port, const std::string& path) {
  httplib::Client client("127.0.0.1", http_port);
  auto result = client.Get(path);
  if (!result || result->status != 200) {
    return absl::UnavailableError(absl::StrCat("cannot fetch http://127.0.0.1:", http_port, path));
  }
  return result->body;
}

}  // namespace kiln::testing
