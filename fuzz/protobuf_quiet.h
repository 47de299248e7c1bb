// Internal to fuzz/: included by a target that parses protobuf messages (and defines no
// LLVMFuzzerInitialize of its own), it gives the target libFuzzer's LLVMFuzzerInitialize, which
// silences protobuf's log line for every string that is not UTF-8.
#pragma once

#include "google/protobuf/stubs/logging.h"

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  google::protobuf::SetLogHandler(nullptr);
  return 0;
}
