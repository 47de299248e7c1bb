// ClusterSpec and Server: the cluster of TF_CONFIG and a PS or chief task run in this process.
#include <pybind11/stl.h>

#include <algorithm>
#include <condition_variable>
#include <mutex>
#include <optional>
#include <thread>

#include "CLI/CLI.hpp"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "bindings.h"
#include "call_thread.h"
#include "errors.h"
#include "runtime/runtime.h"
#include "runtime/training_flags.h"
#include "spdlog/spdlog.h"

namespace py = pybind11;

namespace pstrain::python {
namespace {

// A dict of jobs, or TF_CONFIG's JSON text (with "cluster", or the jobs object alone).
ClusterSpec ToClusterSpec(const py::object& spec) {
  const py::module_ json = py::module_::import("json");
  std::string text;
  py::object parsed = py::none();
  if (py::isinstance<py::str>(spec)) {
    text = spec.cast<std::string>();
    try {
      parsed = json.attr("loads")(spec);
    } catch (const py::error_already_set&) {
      // Not JSON: the C++ parser says where.
    }
  } else if (py::isinstance<py::dict>(spec)) {
    parsed = spec;
  } else {
    RaiseInvalidArgument(absl::StrCat("ClusterSpec takes a dict of jobs or JSON text, not a ",
                                      std::string(py::str(spec.get_type().attr("__name__")))));
  }
  if (py::isinstance<py::dict>(parsed)) {
    py::dict d = parsed.cast<py::dict>();
    if (!d.contains("cluster")) {
      py::dict wrapped;
      wrapped["cluster"] = d;
      d = wrapped;
    }
    try {
      text = json.attr("dumps")(d).cast<std::string>();
    } catch (py::error_already_set& e) {
      if (!e.matches(PyExc_Exception)) throw;
      RaiseInvalidArgument(absl::StrCat("ClusterSpec: ", e.what()));
    }
  }
  return ValueOrThrow(ClusterSpec::FromJson(text, "ClusterSpec"));
}

// A task run by RunServer on a thread of its own.
class PyServer {
 public:
  explicit PyServer(ServerOptions options) : state_(std::make_shared<State>()) {
    state_->options = std::move(options);
    state_->thread = std::thread([s = state_] {
      const int code = RunServer(s->options);
      std::lock_guard<std::mutex> lock(s->mu);
      s->exit_code = code;
      s->cv.notify_all();
    });
  }
  // A task still running is left to end with the job (or with the process).
  ~PyServer() {
    if (exit_code()) {
      py::gil_scoped_release release;
      state_->thread.join();
    } else {
      state_->thread.detach();
    }
  }

  // The exit code once the task ended within `timeout` seconds (None: no limit), else None.
  std::optional<int> Join(std::optional<double> timeout) {
    const auto end = std::chrono::steady_clock::now() +
                     std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                         std::chrono::duration<double>(timeout.value_or(0)));
    WaitWithSignals([&](std::chrono::milliseconds slice) {
      std::unique_lock<std::mutex> lock(state_->mu);
      const auto until = timeout ? std::min(end, std::chrono::steady_clock::now() + slice)
                                 : std::chrono::steady_clock::now() + slice;
      state_->cv.wait_until(lock, until, [&] { return state_->exit_code.has_value(); });
      return state_->exit_code.has_value() || (timeout && std::chrono::steady_clock::now() >= end);
    });
    return exit_code();
  }
  std::optional<int> exit_code() const {
    std::lock_guard<std::mutex> lock(state_->mu);
    return state_->exit_code;
  }
  const ServerOptions& options() const { return state_->options; }

 private:
  struct State {
    ServerOptions options;
    std::mutex mu;
    std::condition_variable cv;
    std::optional<int> exit_code;
    std::thread thread;
  };
  std::shared_ptr<State> state_;
};

// The flags of `pstrain server` that the Server takes: the training flags, --connect_timeout.
struct ServerFlags {
  CLI::App app{"pstrain.Server"};
  TrainingFlags training;
  double connect_timeout_s = 60;
  ServerFlags() {
    app.add_option("--connect_timeout", connect_timeout_s, "seconds to wait for peers");
    training.AddTo(&app);
  }
};

std::unique_ptr<PyServer> MakeServer(const py::object& cluster, const std::string& job, int task,
                                     std::vector<std::string> args) {
  ServerOptions o;
  o.cluster =
      py::isinstance<ClusterSpec>(cluster) ? cluster.cast<ClusterSpec>() : ToClusterSpec(cluster);
  o.job = job;
  o.task = task;
  o.stop_on_signals = false;  // Ctrl-C belongs to Python
  ValueOrThrow(o.cluster.Address(job, task));
  if (job != "ps" && job != "chief") {
    RaiseInvalidArgument(
        absl::StrCat("Server runs a ps or chief task, not ", job, " (a worker is a Client)"));
  }
  ServerFlags flags;
  std::reverse(args.begin(), args.end());  // CLI11 takes them last first
  try {
    flags.app.parse(args);
  } catch (const CLI::ParseError& e) {
    RaiseInvalidArgument(absl::StrCat("Server: ", e.what()));
  }
  o.job_config = ValueOrThrow(flags.training.ToConfig());
  o.connect_timeout_s = flags.connect_timeout_s;
  if (job == "chief") {
    for (const std::string& w : flags.training.Inapplicable()) spdlog::warn("Server: {}", w);
  } else if (const std::vector<std::string> given = flags.training.Given(); given.size() > 1) {
    // --model is always given (external by default); others are the chief's only.
    spdlog::warn("Server: {} are read by the chief only; {}:{} ignores them",
                 absl::StrJoin(given, ", "), job, task);
  }
  return std::make_unique<PyServer>(std::move(o));
}

std::vector<std::string> FlagNames() {
  ServerFlags flags;
  std::vector<std::string> names;
  for (const CLI::Option* o : flags.app.get_options()) {
    for (const std::string& n : o->get_lnames()) names.push_back(n);
  }
  return names;
}

}  // namespace

void BindCluster(py::module_& m) {
  py::class_<ClusterSpec>(m, "ClusterSpec")
      .def(py::init(&ToClusterSpec), py::arg("spec"))
      .def_readonly("jobs", &ClusterSpec::jobs)
      .def_readonly("task_type", &ClusterSpec::task_type)
      .def_readonly("task_index", &ClusterSpec::task_index)
      .def("num_tasks", &ClusterSpec::NumTasks, py::arg("job"))
      .def(
          "address",
          [](const ClusterSpec& c, const std::string& job, int index) {
            return ValueOrThrow(c.Address(job, index));
          },
          py::arg("job"), py::arg("index"))
      .def("to_json", &ClusterSpec::ToJson)
      .def("__repr__", [](const ClusterSpec& c) {
        return absl::StrCat("pstrain.ClusterSpec(", c.ToJson(), ")");
      });
  m.def("cluster_from_tf_config", [] { return ValueOrThrow(ClusterSpec::Load("")); });
  m.def("_tf_config_task_error", [](const ClusterSpec& c) -> std::optional<std::string> {
    if (c.task_status.ok()) return std::nullopt;
    return std::string(c.task_status.message());
  });
}

void BindServer(py::module_& m) {
  py::class_<PyServer>(m, "_Server")
      .def(py::init(&MakeServer), py::arg("cluster"), py::arg("job"), py::arg("task"),
           py::arg("args"))
      .def("join", &PyServer::Join, py::arg("timeout") = py::none())
      .def_property_readonly("exit_code", &PyServer::exit_code)
      .def_property_readonly("job", [](const PyServer& s) { return s.options().job; })
      .def_property_readonly("task", [](const PyServer& s) { return s.options().task; });
  m.def("_server_flag_names", &FlagNames);
  m.def("_request_job_stop", [](const std::string& reason) { RequestJobStop(reason); });
  m.def("_set_log_level",
        [](const std::string& level) { spdlog::set_level(spdlog::level::from_str(level)); });
}

}  // namespace pstrain::python
