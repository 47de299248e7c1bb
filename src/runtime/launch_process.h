// Internal to src/runtime: the processes of `pstrain launch`, and where they listen.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace pstrain {

// `n` distinct free TCP ports on 127.0.0.1.
absl::StatusOr<std::vector<int>> FreePorts(int n);

// Prepends to PYTHONPATH in `env` ("NAME=value" entries) the folder of the pstrain Python
// package built beside `binary` (<its folder>/python, which holds pstrain/__init__.py in a build
// tree), so that a worker command's `import pstrain` finds the package of the binary that
// launched it without the user setting PYTHONPATH. Changes nothing when there is no such
// folder: an installed binary's package is on the interpreter's own path.
void PrependBuiltPythonPackage(const std::string& binary, std::vector<std::string>* env);

// This process's environment with TF_CONFIG set to `tf_config`, each of `defaults`
// ("NAME=value") where the environment has no NAME, and `overrides`: "NAME=value" replaces NAME,
// a bare "NAME" removes it.
std::vector<std::string> EnvironmentWith(const std::string& tf_config,
                                         const std::vector<std::string>& defaults = {},
                                         const std::vector<std::string>& overrides = {});

// Runs the file `path` with `argv` and environment `env` in its own process group, its stdout
// and stderr on `out_fd` and `err_fd` (-1: this process's), and asks the kernel to kill it if
// this process dies. The child's pid, or -1 if fork failed.
pid_t Spawn(const std::string& path, const std::vector<std::string>& argv,
            const std::vector<std::string>& env, int out_fd, int err_fd);

// The file execvp would run for `command` (a name looked up in PATH, or a path if it contains a
// '/'). NotFound ("command \"x\" not found in PATH") or PermissionDenied ("... is not
// executable") otherwise.
absl::StatusOr<std::string> FindCommand(const std::string& command);

}  // namespace pstrain
