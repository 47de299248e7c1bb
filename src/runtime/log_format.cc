#include "runtime/log_format.h"

namespace pstrain {

void SetLogFormat(const std::string& format, const std::string& task) {}

}  // namespace pstrain
