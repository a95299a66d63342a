#include "proto/fx/nonfinite.h"

#include <array>
#include <cctype>
#include <limits>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace kiln::fx {
namespace {

constexpr std::array<std::pair<absl::string_view, absl::string_view>, 3> kWords = {{
    {"-Infinity", "-inf"},
    {"Infinity", "inf"},
    {"NaN", "nan"},
}};

bool IsWordChar(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) != 0 || c == '_' || c == '.' || c == '+';
}

}  // namespace

std::string TagNonFiniteNumbers(absl::string_view json) {
  std::string out;
  size_t copied = 0;  // json[0, copied) is in `out` once anything was replaced
  bool in_string = false;
  for (size_t i = 0; i < json.size(); ++i) {
    const char c = json[i];
    if (in_string) {
      if (c == '\\') {
        ++i;  // the escaped character cannot end the string
      } else if (c == '"') {
        in_string = false;
      }
      continue;
    }
    if (c == '"') {
      in_string = true;
      continue;
    }
    if (c != '-' && c != 'I' && c != 'N') continue;
    if (i > 0 && IsWordChar(json[i - 1])) continue;
    for (const auto& [word, tag] : kWords) {
      if (!absl::StartsWith(json.substr(i), word)) continue;
      const size_t end = i + word.size();
      if (end < json.size() && IsWordChar(json[end])) continue;
      absl::StrAppend(&out, json.substr(copied, i - copied), "{\"", kNonFiniteTag, "\":\"", tag,
                      "\"}");
      copied = end;
      i = end - 1;
      break;
    }
  }
  if (copied == 0) return std::string(json);
  absl::StrAppend(&out, json.substr(copied));
  return out;
}

std::optional<double> NonFiniteFromTag(absl::string_view text) {
  if (text == "inf") return std::numeric_limits<double>::infinity();
  if (text == "-inf") return -std::numeric_limits<double>::infinity();
  if (text == "nan") return std::numeric_limits<double>::quiet_NaN();
  return std::nullopt;
}

}  // namespace kiln::fx
