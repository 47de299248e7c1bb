// A schema in YAML (features/features.h Schema::FromYaml) on any bytes: yaml-cpp's parser, the
// conversion to JSON with its bounds on depth and on values once aliases are expanded, then the
// JSON schema's reader. A refusal is InvalidArgument naming the file; a schema accepted
// survives ToJson and FromJson unchanged.
//   input: the YAML document
#include <string>

#include "features/features.h"
#include "schema_checks.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace pstrain;
  fuzz::CheckSchemaAnswer(
      Schema::FromYaml(absl::string_view(reinterpret_cast<const char*>(data), size), "schema.yaml"),
      "schema.yaml");
  return 0;
}
