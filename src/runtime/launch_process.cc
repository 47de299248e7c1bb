#include "runtime/launch_process.h"

#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace pstrain {
namespace {

std::vector<char*> Pointers(const std::vector<std::string>& strings) {
  std::vector<char*> p;
  for (const std::string& s : strings) p.push_back(const_cast<char*>(s.c_str()));
  p.push_back(nullptr);
  return p;
}

bool IsExecutableFile(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) && access(path.c_str(), X_OK) == 0;
}

}  // namespace

// All sockets stay bound until every port is chosen, so none repeats.
absl::StatusOr<std::vector<int>> FreePorts(int n) {
  std::vector<int> fds, ports;
  absl::Status error;
  for (int i = 0; i < n && error.ok(); ++i) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(addr);
    if (fd < 0 || bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
        getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
      error = absl::UnavailableError(absl::StrCat("cannot pick a free port: ", strerror(errno)));
    } else {
      ports.push_back(ntohs(addr.sin_port));
    }
    if (fd >= 0) fds.push_back(fd);
  }
  for (int fd : fds) close(fd);
  if (!error.ok()) return error;
  return ports;
}

std::vector<std::string> EnvironmentWith(const std::string& tf_config,
                                         const std::vector<std::string>& defaults,
                                         const std::vector<std::string>& overrides) {
  auto name_of = [](const std::string& entry) { return entry.substr(0, entry.find('=')); };
  std::vector<std::string> replaced = {"TF_CONFIG"};
  for (const std::string& o : overrides) replaced.push_back(name_of(o));
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string entry = *e;
    if (std::find(replaced.begin(), replaced.end(), name_of(entry)) == replaced.end()) {
      env.push_back(entry);
    }
  }
  env.push_back("TF_CONFIG=" + tf_config);
  for (const std::string& d : defaults) {
    if (std::getenv(name_of(d).c_str()) == nullptr) env.push_back(d);
  }
  for (const std::string& o : overrides) {
    if (o.find('=') != std::string::npos) env.push_back(o);
  }
  return env;
}

void PrependBuiltPythonPackage(const std::string& binary, std::vector<std::string>* env) {
  std::error_code ec;
  const std::filesystem::path dir = std::filesystem::path(binary).parent_path() / "python";
  if (!std::filesystem::is_regular_file(dir / "pstrain" / "__init__.py", ec)) return;
  const std::string name = "PYTHONPATH=";
  auto it = std::find_if(env->begin(), env->end(),
                         [&](const std::string& e) { return absl::StartsWith(e, name); });
  if (it == env->end()) {
    env->push_back(name + dir.string());
  } else if (it->size() == name.size()) {
    *it = name + dir.string();
  } else {
    *it = absl::StrCat(name, dir.string(), ":", it->substr(name.size()));
  }
}

// Its own process group: a terminal's Ctrl-C reaches only the launcher, which then stops the
// cluster, and the launcher can stop whatever the task forked.
pid_t Spawn(const std::string& path, const std::vector<std::string>& argv,
            const std::vector<std::string>& env, int out_fd, int err_fd) {
  // Built before fork: the child may only make async-signal-safe calls.
  std::vector<char*> args = Pointers(argv), envp = Pointers(env);
  const std::string cannot = absl::StrCat("pstrain launch: cannot run ", path, ": exec failed\n");
  pid_t parent = getpid();
  pid_t pid = fork();
  if (pid != 0) return pid;
  setpgid(0, 0);
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() != parent) _exit(1);
  if (out_fd >= 0) dup2(out_fd, STDOUT_FILENO);
  if (err_fd >= 0) dup2(err_fd, STDERR_FILENO);
  execve(path.c_str(), args.data(), envp.data());
  (void)!write(STDERR_FILENO, cannot.data(), cannot.size());
  _exit(127);
}

absl::StatusOr<std::string> FindCommand(const std::string& command) {
  if (command.empty()) return absl::InvalidArgumentError("the worker command is empty");
  if (command.find('/') != std::string::npos) {
    if (!std::filesystem::exists(command)) {
      return absl::NotFoundError(absl::StrCat("command \"", command, "\" not found"));
    }
    if (!IsExecutableFile(command)) {
      return absl::PermissionDeniedError(
          absl::StrCat("command \"", command, "\" is not an executable file"));
    }
    return command;
  }
  const char* env_path = std::getenv("PATH");
  const std::string path = env_path != nullptr ? env_path : "/bin:/usr/bin";
  bool seen = false;  // a file of that name that is not executable
  for (absl::string_view dir : absl::StrSplit(path, ':')) {
    const std::string candidate = absl::StrCat(dir.empty() ? "." : dir, "/", command);
    if (IsExecutableFile(candidate)) return candidate;
    seen = seen || std::filesystem::exists(candidate);
  }
  if (seen) {
    return absl::PermissionDeniedError(
        absl::StrCat("command \"", command, "\" found in PATH is not executable"));
  }
  return absl::NotFoundError(absl::StrCat("command \"", command, "\" not found in PATH"));
}

}  // namespace pstrain
