// A schema in YAML (features/features.h Schema::FromYaml) on any bytes: yaml-cpp's parser, the
// conversion to JSON with its bounds on depth and on values once aliases are expanded, then the
// JSON schema's reader. A refusal is InvalidArgument naming the file; a schema accepted
// survives ToJson and FromJson unchanged.
//   input: the YAML document
#include <string>

#include "features/features.h"
#include "fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace pstrain;
  absl::StatusOr<Schema> schema =
      Schema::FromYaml(absl::string_view(reinterpret_cast<const char*>(data), size), "schema.yaml");
  if (!schema.ok()) {
    FUZZ_CHECK(schema.status().code() == absl::StatusCode::kInvalidArgument,
               schema.status().ToString());
    FUZZ_CHECK(schema.status().message().rfind("schema.yaml", 0) == 0, "the error names the file");
    return 0;
  }
  absl::StatusOr<Schema> again = Schema::FromJson(schema->ToJson(), "ToJson");
  FUZZ_CHECK(again.ok(), "ToJson gives what FromJson refuses: " + again.status().ToString());
  FUZZ_CHECK(again->ToJson() == schema->ToJson(), "ToJson and FromJson change the schema");
  return 0;
}
