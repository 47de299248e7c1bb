// TF_CONFIG and the --cluster file (runtime/runtime.h ClusterSpec::FromJson): any bytes in the
// environment variable. What is accepted has one chief and at least one PS and worker, every
// address host:port and used once, and survives ToJson and FromJson unchanged.
//   input: the value of TF_CONFIG
#include <set>
#include <string>

#include "fuzz_util.h"
#include "runtime/runtime.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace pstrain;
  const std::string text(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<ClusterSpec> spec = ClusterSpec::FromJson(text, "TF_CONFIG");
  if (!spec.ok()) {
    FUZZ_CHECK(spec.status().code() == absl::StatusCode::kInvalidArgument,
               spec.status().ToString());
    FUZZ_CHECK(spec.status().message().rfind("TF_CONFIG: ", 0) == 0, "the error names TF_CONFIG");
    return 0;
  }
  FUZZ_CHECK(
      spec->NumTasks("chief") == 1 && spec->NumTasks("ps") >= 1 && spec->NumTasks("worker") >= 1,
      "the jobs a cluster needs");
  std::set<std::string> seen;
  for (const auto& [job, tasks] : spec->jobs) {
    for (const std::string& a : tasks) FUZZ_CHECK(seen.insert(a).second, "an address used twice");
  }
  if (spec->task_type) {
    FUZZ_CHECK(spec->task_status.ok() && spec->task_index &&
                   spec->Address(*spec->task_type, *spec->task_index).ok(),
               "the task is in the cluster");
  }
  absl::StatusOr<ClusterSpec> again = ClusterSpec::FromJson(spec->ToJson(), "ToJson");
  FUZZ_CHECK(again.ok(), "ToJson gives what FromJson refuses: " + again.status().ToString());
  FUZZ_CHECK(again->jobs == spec->jobs && again->task_type == spec->task_type &&
                 again->task_index == spec->task_index,
             "ToJson and FromJson change the cluster");
  return 0;
}
