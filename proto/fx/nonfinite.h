#pragma once

// Python's json module writes infinities and NaN as the bare words Infinity, -Infinity and
// NaN, which JSON itself does not have (attention masks are built from -inf constants, so
// captures contain them). Before parsing, the capture importer rewrites each such word outside
// strings into a tagged object, {"$float": "inf"|"-inf"|"nan"}, that the parser accepts and
// the importer reads back as the double it stands for. Text without them is returned as is.

#include <optional>
#include <string>

#include "absl/strings/string_view.h"

namespace kiln::fx {

inline constexpr char kNonFiniteTag[] = "$float";

// `json` with every bare Infinity/-Infinity/NaN outside strings replaced by the tagged object.
std::string TagNonFiniteNumbers(absl::string_view json);

// The double a tag's text stands for ("inf", "-inf", "nan"), or nullopt for other text.
std::optional<double> NonFiniteFromTag(absl::string_view text);

}  // namespace kiln::fx
