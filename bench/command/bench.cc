#include "bench/command/bench.h"

#include <sys/utsname.h>
#include <unistd.h>

#include <cstdio>
#include <ctime>
#include <fstream>
#include <iostream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "bench/command/bench_internal.h"

namespace pstrain {
namespace {

// "<cpu model>, <n> cores, <kernel>" from /proc/cpuinfo, sysconf and uname.
std::string Machine() {
  std::string cpu = "unknown CPU";
  std::ifstream info("/proc/cpuinfo");
  for (std::string line; std::getline(info, line);) {
    if (line.rfind("model name", 0) == 0 && line.find(':') != std::string::npos) {
      cpu = line.substr(line.find(':') + 2);
      break;
    }
  }
  utsname u{};
  uname(&u);
  return absl::StrCat(cpu, ", ", sysconf(_SC_NPROCESSORS_ONLN), " cores, Linux ", u.release);
}

// The checkout's revision, if the bench runs in one.
std::string Revision(const std::string& dir) {
  const std::string log = dir + "/revision.txt";
  absl::StatusOr<std::unique_ptr<bench::Process>> git =
      bench::Process::Start("/usr/bin/git", {"rev-parse", "--short", "HEAD"}, {}, log);
  if (!git.ok() || !(*git)->Wait(absl::Seconds(10)).ok()) return "unknown";
  const std::string rev = bench::LastLine(bench::ReadFile(log));
  std::remove(log.c_str());
  return rev.empty() || rev.find(' ') != std::string::npos ? "unknown" : rev;
}

// The 1-, 5- and 15-minute load averages: on a shared machine, what else was running.
std::string Load() {
  std::ifstream f("/proc/loadavg");
  std::string one, five, fifteen;
  f >> one >> five >> fifteen;
  return one.empty() ? "unknown" : absl::StrCat(one, " ", five, " ", fifteen);
}

// What an earlier --out file says from a "## What limits it" heading on: notes written by hand
// on the numbers, which a new run keeps (under its new tables) for someone to check against them.
std::string KeptNotes(const std::string& path) {
  const std::string old = bench::ReadFile(path);
  const size_t at = old.find("\n## What limits it");
  return at == std::string::npos ? "" : old.substr(at);
}

std::string Now() {
  char buf[64];
  const std::time_t t = std::time(nullptr);
  std::strftime(buf, sizeof(buf), "%Y-%m-%d %H:%M UTC", std::gmtime(&t));
  return buf;
}

}  // namespace

BenchCommand::BenchCommand(CLI::App* app)
    : cmd_(app->add_subcommand("bench", "measure the data plane against raw TCP and memcpy")) {
  cmd_->add_option("--out", out_, "write the tables (Markdown) to this file");
  cmd_->add_flag("--quick", quick_,
                 "tiny sizes and one repetition: checks that every table is made, measures "
                 "nothing worth reading");
  cmd_->add_option("--transports", transports_, "comma-separated transports to measure")
      ->capture_default_str();
  cmd_->add_option("--sections", sections_, "comma-separated: transport, apply, e2e, memory")
      ->capture_default_str();
  cmd_->add_option("--sizes", sizes_,
                   "comma-separated transport sizes (4KB, 64KB, 1MB, 16MB, 64MB, 256MB; default "
                   "all), e.g. to profile one");
  cmd_->add_option("--data", data_, "MNIST directory for the end-to-end section")
      ->capture_default_str();
  cmd_->add_option("--python", python_, "Python with torch, for the PyTorch reference")
      ->capture_default_str();
  cmd_->add_option("--torch_script", torch_script_, "the PyTorch reference's script")
      ->capture_default_str();
  cmd_->add_option("--memory_baseline", memory_baseline_,
                   "another pstrain binary whose PS the memory section measures alongside this "
                   "one's, the trials alternating (a build before a change)");
}

int BenchCommand::Run(const std::string& self) const {
  bench::BenchOptions o;
  o.self = self;
  o.quick = quick_;
  o.transports = absl::StrSplit(transports_, ',', absl::SkipEmpty());
  o.sections = absl::StrSplit(sections_, ',', absl::SkipEmpty());
  o.sizes = absl::StrSplit(sizes_, ',', absl::SkipEmpty());
  o.data_dir = data_;
  o.python = python_;
  o.torch_script = torch_script_;
  o.memory_baseline = memory_baseline_;
  for (const std::string& s : o.sections) {
    if (s != "transport" && s != "apply" && s != "e2e" && s != "memory") {
      std::cerr << "pstrain bench: error: unknown section \"" << s
                << "\" in --sections (transport, apply, e2e, memory)\n";
      return 2;
    }
  }
  for (const std::string& t : o.transports) {
    if (t != "grpc" && t != "tcp" && t != "ucx") {
      std::cerr << "pstrain bench: error: unknown transport \"" << t
                << "\" in --transports (grpc, tcp, ucx)\n";
      return 2;
    }
  }
  if (absl::Status s = bench::CheckSizes(o); !s.ok()) {
    std::cerr << "pstrain bench: error: " << s.message() << "\n";
    return 2;
  }
  std::string out = absl::StrCat("# pstrain bench\n\n", Now(), ", revision ", Revision("/tmp"),
                                 ", ", Machine(), ", load average ", Load(),
                                 o.quick ? " (--quick: not a measurement)" : "", "\n\n");
  std::cout << out << std::flush;
  const auto emit = [&](const std::vector<bench::Table>& tables) {
    for (const bench::Table& t : tables) {
      const std::string md = bench::ToMarkdown(t);
      std::cout << md << std::flush;
      out += md;
    }
  };
  // The transport section forks its workers before this process makes any gRPC call.
  for (const std::string& s : o.sections) {
    if (s == "transport") emit(bench::TransportTables(o));
    if (s == "apply") emit(bench::ApplyTables(o));
    if (s == "e2e") emit(bench::EndToEndTables(o));
    if (s == "memory") emit(bench::MemoryTables(o));
  }
  const std::string end = absl::StrCat("Load average at the end: ", Load(), "\n");
  std::cout << end;
  out += end;
  if (!out_.empty()) {
    const std::string kept = KeptNotes(out_);
    std::ofstream f(out_);
    f << out << kept;
    if (!f) {
      std::cerr << "pstrain bench: error: cannot write " << out_ << "\n";
      return 1;
    }
  }
  return 0;
}

}  // namespace pstrain
