// Helper processes of `pstrain bench`: forked command servers (Helper), started pstrain
// processes (Process), free ports.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "bench/command/bench_internal.h"

namespace pstrain::bench {
namespace {

bool WriteAll(int fd, const void* data, size_t n) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    const ssize_t w = write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    p += w;
    n -= static_cast<size_t>(w);
  }
  return true;
}

// Reads n bytes before `deadline`; false on EOF, error or timeout (*timed_out says which).
bool ReadAll(int fd, void* data, size_t n, absl::Time deadline, bool* timed_out) {
  char* p = static_cast<char*>(data);
  *timed_out = false;
  while (n > 0) {
    pollfd pfd{fd, POLLIN, 0};
    const int64_t ms = std::max<int64_t>(0, absl::ToInt64Milliseconds(deadline - absl::Now()));
    const int ready = poll(&pfd, 1, static_cast<int>(std::min<int64_t>(ms, 1 << 30)));
    if (ready < 0 && errno == EINTR) continue;
    if (ready == 0) {
      *timed_out = true;
      return false;
    }
    const ssize_t r = read(fd, p, n);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    p += r;
    n -= static_cast<size_t>(r);
  }
  return true;
}

// Wire form of a Reply: seconds, error length, sample count, then the error and the samples.
struct ReplyHead {
  double seconds;
  int32_t error_bytes;
  int32_t samples;
};

[[noreturn]] void ServeCommands(int from, int to, const CommandHandler& handler) {
  Command c;
  bool timed_out = false;
  while (ReadAll(from, &c, sizeof(c), absl::InfiniteFuture(), &timed_out) && c.op != kQuit) {
    Reply r = handler(c);
    const ReplyHead head{r.seconds, static_cast<int32_t>(r.error.size()),
                         static_cast<int32_t>(r.samples.size())};
    if (!WriteAll(to, &head, sizeof(head)) || !WriteAll(to, r.error.data(), r.error.size()) ||
        !WriteAll(to, r.samples.data(), r.samples.size() * sizeof(double))) {
      break;
    }
  }
  _exit(0);  // no destructors of the bench's state, which the fork copied
}

void Reap(pid_t pid) {
  kill(pid, SIGKILL);
  while (waitpid(pid, nullptr, 0) < 0 && errno == EINTR) {
  }
}

}  // namespace

absl::StatusOr<std::unique_ptr<Helper>> Helper::Fork(CommandHandler handler) {
  int down[2], up[2];
  if (pipe2(down, O_CLOEXEC) != 0) return absl::InternalError("pipe failed");
  if (pipe2(up, O_CLOEXEC) != 0) {
    close(down[0]);
    close(down[1]);
    return absl::InternalError("pipe failed");
  }
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid < 0) return absl::InternalError(absl::StrCat("fork failed: ", std::strerror(errno)));
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(1);
    close(down[1]);
    close(up[0]);
    ServeCommands(down[0], up[1], handler);
  }
  close(down[0]);
  close(up[1]);
  return std::unique_ptr<Helper>(new Helper(pid, down[1], up[0]));
}

Helper::~Helper() {
  const Command quit{kQuit, 0, 0};
  WriteAll(to_, &quit, sizeof(quit));
  close(to_);
  close(from_);
  Reap(pid_);
}

absl::Status Helper::Send(const Command& c) {
  if (!WriteAll(to_, &c, sizeof(c))) {
    return absl::UnavailableError(absl::StrCat("helper process ", pid_, " is gone"));
  }
  return absl::OkStatus();
}

absl::StatusOr<Reply> Helper::Receive(absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  ReplyHead head;
  bool timed_out = false;
  Reply r;
  bool ok = ReadAll(from_, &head, sizeof(head), deadline, &timed_out);
  if (ok) {
    r.seconds = head.seconds;
    r.error.resize(head.error_bytes);
    r.samples.resize(head.samples);
    ok = ReadAll(from_, r.error.data(), r.error.size(), deadline, &timed_out) &&
         ReadAll(from_, r.samples.data(), r.samples.size() * sizeof(double), deadline, &timed_out);
  }
  if (timed_out) {
    return absl::DeadlineExceededError(absl::StrCat("helper process ", pid_, " did not answer in ",
                                                    absl::FormatDuration(timeout)));
  }
  if (!ok) return absl::UnavailableError(absl::StrCat("helper process ", pid_, " ended"));
  return r;
}

absl::StatusOr<std::vector<Reply>> RunAll(const std::vector<Helper*>& helpers, const Command& c,
                                          absl::Duration timeout) {
  for (Helper* h : helpers) {
    if (absl::Status s = h->Send(c); !s.ok()) return s;
  }
  std::vector<Reply> replies;
  absl::Status first;
  for (Helper* h : helpers) {
    absl::StatusOr<Reply> r = h->Receive(timeout);
    if (!r.ok() && first.ok()) first = r.status();
    if (r.ok() && !r->error.empty() && first.ok()) first = absl::UnavailableError(r->error);
    if (r.ok()) replies.push_back(*std::move(r));
  }
  if (!first.ok()) return first;
  return replies;
}

absl::StatusOr<std::unique_ptr<Process>> Process::Start(const std::string& binary,
                                                        const std::vector<std::string>& args,
                                                        const std::vector<std::string>& env,
                                                        const std::string& log) {
  std::vector<std::string> argv_s = {binary};
  argv_s.insert(argv_s.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (std::string& a : argv_s) argv.push_back(a.data());
  argv.push_back(nullptr);
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid < 0) return absl::InternalError(absl::StrCat("fork failed: ", std::strerror(errno)));
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(1);
    const int fd = open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd >= 0) {
      dup2(fd, 1);
      dup2(fd, 2);
    }
    for (const std::string& e : env) putenv(const_cast<char*>(e.c_str()));
    execv(binary.c_str(), argv.data());
    _exit(127);
  }
  return std::unique_ptr<Process>(new Process(pid));
}

Process::~Process() {
  if (!reaped_) Reap(pid_);
}

absl::StatusOr<int> Process::Wait(absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  while (!reaped_) {
    int status = 0;
    const pid_t r = waitpid(pid_, &status, WNOHANG);
    if (r == pid_) {
      reaped_ = true;
      return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    }
    if (absl::Now() > deadline) {
      return absl::DeadlineExceededError(
          absl::StrCat("process ", pid_, " still running after ", absl::FormatDuration(timeout)));
    }
    absl::SleepFor(absl::Milliseconds(20));
  }
  return absl::FailedPreconditionError("already reaped");
}

bool Process::Running() {
  if (reaped_) return false;
  return !Wait(absl::ZeroDuration()).ok();
}

absl::StatusOr<int> FreePort() {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return absl::InternalError("socket failed");
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(a);
  const bool ok = bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0 &&
                  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0;
  close(fd);
  if (!ok) return absl::InternalError("cannot bind a port of 127.0.0.1");
  return ntohs(a.sin_port);
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string LastLine(const std::string& text) {
  std::string last, line;
  std::istringstream in(text);
  while (std::getline(in, line)) {
    if (!line.empty()) last = line;
  }
  return last;
}

}  // namespace pstrain::bench
