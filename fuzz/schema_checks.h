// What the fuzz targets of a schema reader (JSON, YAML) check of its answer.
#pragma once

#include <string>

#include "features/features.h"
#include "fuzz_util.h"

namespace pstrain::fuzz {

// A refusal is InvalidArgument whose message starts with `source`; a schema accepted survives
// ToJson and FromJson unchanged. Whether it was accepted.
inline bool CheckSchemaAnswer(const absl::StatusOr<Schema>& schema, const std::string& source) {
  if (!schema.ok()) {
    FUZZ_CHECK(schema.status().code() == absl::StatusCode::kInvalidArgument,
               schema.status().ToString());
    FUZZ_CHECK(schema.status().message().rfind(source, 0) == 0, "the error names the file");
    return false;
  }
  absl::StatusOr<Schema> again = Schema::FromJson(schema->ToJson(), "ToJson");
  FUZZ_CHECK(again.ok(), "ToJson gives what FromJson refuses: " + again.status().ToString());
  FUZZ_CHECK(again->ToJson() == schema->ToJson(), "ToJson and FromJson change the schema");
  return true;
}

}  // namespace pstrain::fuzz
