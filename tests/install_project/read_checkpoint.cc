// Reads a checkpoint through the installed client library: read_checkpoint PATH prints one line,
// {"global_step": N, "variables": {"w": [...]}, "tables": {"emb": rows}}; exits 1 with the
// library's error (the file and what is wrong with it) when PATH is not a valid checkpoint.
#include <cstdio>
#include <string>

#include "client/client.h"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: read_checkpoint PATH\n");
    return 2;
  }
  absl::StatusOr<pstrain::CheckpointParameters> c = pstrain::ReadCheckpoint(argv[1]);
  if (!c.ok()) {
    std::fprintf(stderr, "read_checkpoint: %s\n", std::string(c.status().message()).c_str());
    return 1;
  }
  std::string out = "{\"global_step\": " + std::to_string(c->global_step) + ", \"variables\": {";
  for (size_t i = 0; i < c->variables.size(); ++i) {
    const pstrain::CheckpointParameters::Variable& v = c->variables[i];
    out += (i > 0 ? ", \"" : "\"") + v.name + "\": [";
    for (size_t k = 0; k < v.values.size(); ++k) {
      char number[32];
      std::snprintf(number, sizeof(number), "%.9g", v.values[k]);
      out += (k > 0 ? ", " : "") + std::string(number);
    }
    out += "]";
  }
  out += "}, \"tables\": {";
  for (size_t i = 0; i < c->tables.size(); ++i) {
    out += (i > 0 ? ", \"" : "\"") + c->tables[i].name +
           "\": " + std::to_string(c->tables[i].keys.size());
  }
  std::printf("%s}}\n", out.c_str());
  return 0;
}
