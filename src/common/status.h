// InvalidArgument(parts...): the INVALID_ARGUMENT status whose message is the parts joined, as
// absl::StrCat joins them; the one form of the refusals that name what is wrong.
#pragma once

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace pstrain {

template <typename... Parts>
absl::Status InvalidArgument(const Parts&... parts) {
  return absl::InvalidArgumentError(absl::StrCat(parts...));
}

}  // namespace pstrain
