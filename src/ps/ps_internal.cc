#include "ps/ps_internal.h"

#include "absl/strings/str_cat.h"
#include "common/limits.h"

namespace pstrain {
namespace {

// What a message shows of a text taken from a request: all of it up to `limit` bytes, else its
// start and its length.
std::string Shortened(absl::string_view text, size_t limit) {
  if (text.size() <= limit) return std::string(text);
  return absl::StrCat(text.substr(0, 64), "... (", text.size(), " bytes)");
}

}  // namespace

absl::Status CheckSender(bool has_sender, const Sender& sender) {
  if (!has_sender || sender.job().empty()) {
    return absl::InvalidArgumentError("request has no sender");
  }
  return absl::OkStatus();
}

std::string Quoted(absl::string_view name) {
  return absl::StrCat("'", Shortened(name, kMaxNameBytes), "'");
}

std::string SenderString(const Sender& s) {
  return absl::StrCat(Shortened(s.job(), 64), ":", s.task(), " (incarnation ", s.incarnation(),
                      ")");
}

}  // namespace pstrain
