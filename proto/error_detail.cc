#include "proto/error_detail.h"

#include <string>

#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace kiln {

absl::Status WithErrorDetail(absl::Status status, const v1::ErrorDetail& detail) {
  status.SetPayload(kErrorDetailUrl, absl::Cord(detail.SerializeAsString()));
  return status;
}

std::optional<v1::ErrorDetail> ErrorDetailOf(const absl::Status& status) {
  auto payload = status.GetPayload(kErrorDetailUrl);
  if (!payload.has_value()) return std::nullopt;
  v1::ErrorDetail detail;
  if (!detail.ParseFromString(std::string(*payload))) return std::nullopt;
  return detail;
}

absl::Status InvalidField(absl::string_view node, absl::string_view field,
                          absl::string_view description) {
  std::string message;
  if (!node.empty()) absl::StrAppend(&message, "node \"", node, "\" ");
  absl::StrAppend(&message, field, ": ", description);
  v1::ErrorDetail detail;
  v1::FieldViolation* v = detail.add_violations();
  v->set_node(std::string(node));
  v->set_field(std::string(field));
  v->set_description(std::string(description));
  return WithErrorDetail(absl::InvalidArgumentError(message), detail);
}

}  // namespace kiln
