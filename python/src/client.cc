// pstrain.Client: the C++ Client (client/client.h) for Python. Every call runs on the client's
// CallThread, so the GIL is released while it waits and Ctrl-C interrupts it.
#include "client/client.h"

#include <pybind11/stl.h>
#include <unistd.h>

#include <atomic>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "arrays.h"
#include "bindings.h"
#include "call_thread.h"
#include "errors.h"
#include "options.h"

namespace py = pybind11;

namespace pstrain::python {
namespace {

// What the calls on the client's thread share with the Python side. Written by calls, read by
// the Python side only while no call runs (in CallThread::Run's `after`), or atomically.
struct Core {
  std::unique_ptr<Client> client;
  std::vector<const float*> values;          // of the last Pull (the C++ client's buffers)
  std::vector<std::vector<int64_t>> shapes;  // of the variables, by index
  std::vector<const float*> rows;            // of the last Lookup (the C++ client's buffers)
  std::vector<int> dims;                     // of the tables, by index
  ArrayBuffers pulled, looked_up;            // the copies that the arrays own
  std::atomic<int64_t> global_step{0};
  std::atomic<int64_t> pushes{0};
};

class PyClient {
 public:
  static std::unique_ptr<PyClient> Connect(const py::object& chief, const py::object& task,
                                           double timeout, const std::string& push_dtype,
                                           const std::string& transport);
  ~PyClient();  // in a child of fork(), leaves the parent's thread and connections be

  int CreateVariable(const std::string& name, const std::vector<int64_t>& shape,
                     const py::object& initializer, const py::object& optimizer,
                     const std::string& partitioner);
  py::list Pull();
  void Push(const py::sequence& grads, int64_t examples, std::optional<double> loss);
  int CreateTable(TableOptions t, const py::object& initializer, const py::object& optimizer);
  py::list Lookup(const py::sequence& keys);
  void PushSparse(const py::sequence& keys, const py::sequence& grads, int64_t examples,
                  std::optional<double> loss);
  void Barrier(const std::string& name) {
    Call([name](Core& c) { return c.client->Barrier(name); });
  }
  void Done(const std::optional<std::string>& error);
  // The next task (None once every task is applied), and the end of the one in hand.
  std::optional<Task> NextTask(int64_t batch_size) {
    auto task = std::make_shared<std::optional<Task>>();
    Call([task, batch_size](Core& c) {
      absl::StatusOr<std::optional<Task>> t = c.client->NextTask(batch_size);
      if (!t.ok()) return t.status();
      *task = *std::move(t);
      return absl::OkStatus();
    });
    return *task;
  }
  void TaskDone() {
    Call([](Core& c) { return c.client->TaskDone(); });
  }
  bool has_tasks() const { return has_tasks_; }
  bool TaskAbandoned() const { return core_->client->task_abandoned(); }
  bool Exit(const py::object& type, const py::object& value);

  int64_t global_step() const { return core_->global_step; }
  int64_t pushes() const { return core_->pushes; }
  const std::string& mode() const { return mode_; }
  int num_ps() const { return num_ps_; }
  int num_workers() const { return num_workers_; }
  int task() const { return task_; }
  std::vector<std::string> DataPlane() {
    auto names = std::make_shared<std::vector<std::string>>();
    Call([names](Core& c) {
      *names = c.client->data_plane();
      return absl::OkStatus();
    });
    return *names;
  }
  py::list LastAddresses(bool rows) const;
  const std::vector<uintptr_t>& last_push() const { return last_push_; }
  double TimeCppSteps(int steps);

 private:
  PyClient() : core_(std::make_shared<Core>()), thread_(std::make_unique<CallThread>()) {}
  // Runs `call` on the client's thread and raises its error; `after` runs with the GIL once it
  // succeeded, before another call may start.
  void Call(
      std::function<absl::Status(Core&)> call, py::object keep_alive = py::none(),
      const std::function<void()>& after = [] {});
  // "gradient 1 (variable \"b\")" for messages.
  std::string Name(const char* what, const std::vector<std::string>& names, size_t i) const {
    return i < names.size() ? absl::StrCat(what, " ", i, " (\"", names[i], "\")")
                            : absl::StrCat(what, " ", i);
  }

  const std::shared_ptr<Core> core_;
  std::unique_ptr<CallThread> thread_;  // after core_: destroyed first
  const pid_t pid_ = getpid();          // of the process that connected
  std::string mode_;
  int num_ps_ = 0;
  int num_workers_ = 0;
  int task_ = 0;
  bool has_tasks_ = false;
  bool done_called_ = false;
  std::vector<std::string> variables_, tables_;  // names, for messages
  std::vector<int> table_dims_;                  // of tables_
  std::vector<uintptr_t> last_push_;             // where the last push read each gradient
};

PyClient::~PyClient() {
  if (getpid() == pid_) return;
  // A copy in a child of fork(): the call thread exists only in the parent (joining it would
  // wait forever), and closing the parent's gRPC channels from here could hang too. Both are
  // left as they are; the child's exit frees its memory.
  thread_.release();
  new std::shared_ptr<Core>(core_);
}

void PyClient::Call(std::function<absl::Status(Core&)> call, py::object keep_alive,
                    const std::function<void()>& after) {
  // The call thread does not exist in a child of fork(): a call would wait for it forever.
  if (getpid() != pid_) RaiseForked("pstrain.Client", pid_);
  auto status = std::make_shared<absl::Status>(absl::InternalError("the call did not run"));
  thread_->Run(
      [core = core_, status, call = std::move(call)] {
        *status = call(*core);
        if (core->client != nullptr) {
          core->global_step = core->client->global_step();
          core->pushes = core->client->pushes();
        }
      },
      std::move(keep_alive),
      [&] {
        if (status->ok()) after();
      });
  ThrowIfError(*status);
}

std::unique_ptr<PyClient> PyClient::Connect(const py::object& chief, const py::object& task,
                                            double timeout, const std::string& push_dtype,
                                            const std::string& transport) {
  ClientOptions o;
  if (chief.is_none() || task.is_none()) o = ValueOrThrow(ClientOptions::FromTfConfig());
  if (!chief.is_none()) {
    if (!py::isinstance<py::str>(chief)) {
      RaiseInvalidArgument("client options: chief must be \"host:port\", not " +
                           std::string(py::repr(chief)));
    }
    o.chief = chief.cast<std::string>();
  }
  if (!task.is_none()) {
    if (PyBool_Check(task.ptr()) || !PyIndex_Check(task.ptr())) {
      RaiseInvalidArgument("client options: task must be an int, not " +
                           std::string(py::repr(task)));
    }
    try {
      o.task = task.cast<int>();
    } catch (const py::cast_error&) {
      RaiseInvalidArgument("client options: task " + std::string(py::repr(task)) +
                           " is out of range");
    }
  }
  if (!(timeout > 0)) RaiseInvalidArgument("client options: timeout must be positive");
  o.timeout = absl::Seconds(timeout);
  o.push_dtype = push_dtype;  // Client::Connect checks it, and the transport
  o.transport = transport;
  std::unique_ptr<PyClient> c(new PyClient());
  c->Call([o](Core& core) {
    absl::StatusOr<std::unique_ptr<Client>> client = Client::Connect(o);
    if (!client.ok()) return client.status();
    core.client = *std::move(client);
    return absl::OkStatus();
  });
  c->mode_ = c->core_->client->mode();
  c->num_ps_ = c->core_->client->num_ps();
  c->num_workers_ = c->core_->client->num_workers();
  c->has_tasks_ = c->core_->client->has_tasks();
  c->task_ = o.task;
  return c;
}

int PyClient::CreateVariable(const std::string& name, const std::vector<int64_t>& shape,
                             const py::object& initializer, const py::object& optimizer,
                             const std::string& partitioner) {
  VariableOptions v{.name = name,
                    .shape = shape,
                    .initializer = ToInitializer(initializer),
                    .optimizer = ToOptimizer(optimizer),
                    .partitioner = partitioner};
  auto index = std::make_shared<int>(-1);
  Call(
      [v, index](Core& c) {
        absl::StatusOr<int> i = c.client->CreateVariable(v);
        if (!i.ok()) return i.status();
        *index = *i;
        if (*i == static_cast<int>(c.shapes.size())) c.shapes.push_back(v.shape);
        return absl::OkStatus();
      },
      py::none(),
      [&] {
        if (*index == static_cast<int>(variables_.size())) variables_.push_back(name);
      });
  return *index;
}

py::list PyClient::Pull() {
  py::list out;
  Call(
      [](Core& c) {
        if (absl::Status s = c.client->Pull(&c.values); !s.ok()) return s;
        std::vector<size_t> sizes;
        for (size_t i = 0; i < c.values.size(); ++i) sizes.push_back(NumElements(c.shapes[i]));
        c.pulled.Copy(c.values, sizes);
        return absl::OkStatus();
      },
      py::none(),
      [&] {
        for (size_t i = 0; i < core_->pulled.last().size(); ++i) {
          out.append(Own(core_->pulled.last()[i], core_->shapes[i]));
        }
      });
  return out;
}

void PyClient::Push(const py::sequence& grads, int64_t examples, std::optional<double> loss) {
  py::list keep;  // the arrays the views point into, until the push has read them
  std::vector<TensorView> views;
  views.reserve(grads.size());
  for (size_t i = 0; i < grads.size(); ++i) {
    py::array a = AsFloat32(grads[i], "push: " + Name("gradient", variables_, i));
    views.push_back({ShapeOf(a), static_cast<const float*>(a.data())});
    keep.append(a);
  }
  last_push_.clear();
  for (const TensorView& v : views) last_push_.push_back(reinterpret_cast<uintptr_t>(v.data));
  Call([views = std::move(views), examples,
        loss](Core& c) { return c.client->Push(views, examples, loss); },
       keep);
}

int PyClient::CreateTable(TableOptions t, const py::object& initializer,
                          const py::object& optimizer) {
  t.initializer = ToInitializer(initializer);
  t.optimizer = ToOptimizer(optimizer);
  auto index = std::make_shared<int>(-1);
  Call(
      [t, index](Core& c) {
        absl::StatusOr<int> i = c.client->CreateTable(t);
        if (!i.ok()) return i.status();
        *index = *i;
        if (*i == static_cast<int>(c.dims.size())) c.dims.push_back(t.dim);
        return absl::OkStatus();
      },
      py::none(),
      [&] {
        if (*index == static_cast<int>(tables_.size())) {
          tables_.push_back(t.name);
          table_dims_.push_back(t.dim);
        }
      });
  return *index;
}

py::list PyClient::Lookup(const py::sequence& keys) {
  std::vector<std::vector<uint64_t>> k;
  for (size_t i = 0; i < keys.size(); ++i) {
    k.push_back(AsKeys(keys[i], "lookup: keys of " + Name("table", tables_, i)));
  }
  std::vector<int64_t> sizes;
  for (const std::vector<uint64_t>& ki : k) sizes.push_back(static_cast<int64_t>(ki.size()));
  py::list out;
  Call(
      [k = std::move(k)](Core& c) {
        if (absl::Status s = c.client->Lookup(k, &c.rows); !s.ok()) return s;
        std::vector<size_t> sizes;
        for (size_t i = 0; i < c.rows.size(); ++i) sizes.push_back(k[i].size() * c.dims[i]);
        c.looked_up.Copy(c.rows, sizes);
        return absl::OkStatus();
      },
      py::none(),
      [&] {
        for (size_t i = 0; i < core_->looked_up.last().size(); ++i) {
          out.append(Own(core_->looked_up.last()[i], {sizes[i], core_->dims[i]}));
        }
      });
  return out;
}

void PyClient::PushSparse(const py::sequence& keys, const py::sequence& grads, int64_t examples,
                          std::optional<double> loss) {
  std::vector<std::vector<uint64_t>> k;
  for (size_t i = 0; i < keys.size(); ++i) {
    k.push_back(AsKeys(keys[i], "push_sparse: keys of " + Name("table", tables_, i)));
  }
  std::vector<std::vector<float>> g;
  for (size_t i = 0; i < grads.size(); ++i) {
    const std::string what = "push_sparse: gradient of " + Name("table", tables_, i);
    py::array a = AsFloat32(grads[i], what);
    // Rows in order: [len(keys), dim], or as many floats flat. Another shape of the same size
    // (a transpose) would put values in the wrong rows.
    if (i < table_dims_.size() && i < k.size() && a.ndim() != 1) {
      const std::vector<int64_t> rows = {static_cast<int64_t>(k[i].size()), table_dims_[i]};
      if (ShapeOf(a) != rows) {
        RaiseInvalidArgument(absl::StrCat(what, " has shape ", ShapeString(ShapeOf(a)), ", not ",
                                          ShapeString(rows), " (one row per key)"));
      }
    }
    const float* p = static_cast<const float*>(a.data());
    g.emplace_back(p, p + a.size());
  }
  Call([k = std::move(k), g = std::move(g), examples, loss](Core& c) {
    return c.client->PushSparse(k, g, examples, loss);
  });
}

void PyClient::Done(const std::optional<std::string>& error) {
  done_called_ = true;
  const absl::Status outcome = error ? absl::UnknownError(*error) : absl::OkStatus();
  Call([outcome](Core& c) { return c.client->Done(outcome); });
}

bool PyClient::Exit(const py::object& type, const py::object& value) {
  // A child of fork() leaving the block: the worker is the parent's to end.
  if (done_called_ || getpid() != pid_) return false;
  if (type.is_none()) {
    Done(std::nullopt);
    return false;
  }
  // An interrupted call still running would hold Done back until its deadline: leave the chief
  // to declare this worker lost instead.
  if (thread_->busy()) return false;
  const std::string what =
      absl::StrCat(std::string(py::str(type.attr("__name__"))), ": ", std::string(py::str(value)));
  try {
    Done(what);
  } catch (const py::error_already_set& e) {
    // The exception leaving the block is the one to see; a failed report must not mask it.
    if (!e.matches(PyExc_Exception)) throw;
  }
  return false;
}

// For benchmarks: `steps` Pull + Push (of zeros) made from C++ on the client's thread, as a C++
// training loop makes them; the seconds they took.
double PyClient::TimeCppSteps(int steps) {
  auto seconds = std::make_shared<double>(0);
  Call([steps, seconds](Core& c) {
    std::vector<std::vector<float>> zeros;
    std::vector<TensorView> grads;
    for (const std::vector<int64_t>& shape : c.shapes) zeros.emplace_back(NumElements(shape));
    for (size_t i = 0; i < c.shapes.size(); ++i) grads.push_back({c.shapes[i], zeros[i].data()});
    const absl::Time start = absl::Now();
    for (int i = 0; i < steps; ++i) {
      if (absl::Status s = c.client->Pull(&c.values); !s.ok()) return s;
      if (absl::Status s = c.client->Push(grads); !s.ok()) return s;
    }
    *seconds = absl::ToDoubleSeconds(absl::Now() - start);
    return absl::OkStatus();
  });
  return *seconds;
}

py::list PyClient::LastAddresses(bool rows) const {
  py::list out;
  for (const ArrayBuffers::Buffer& b : rows ? core_->looked_up.last() : core_->pulled.last()) {
    out.append(reinterpret_cast<uintptr_t>(b->data()));
  }
  return out;
}

}  // namespace

void BindClient(py::module_& m) {
  py::class_<Task>(m, "_Task")
      .def_readonly("epoch", &Task::epoch)
      .def_readonly("index", &Task::index)
      .def_readonly("begin", &Task::begin)
      .def_readonly("end", &Task::end)
      .def_readonly("seed", &Task::seed)
      .def_readonly("batch_size", &Task::batch_size)
      .def_property_readonly("num_batches", &Task::num_batches)
      .def("rows", [](const Task& t) {
        const std::vector<int64_t> rows = t.Rows();
        return py::array_t<int64_t>(static_cast<py::ssize_t>(rows.size()), rows.data());
      });
  py::class_<PyClient>(m, "Client", R"(A worker's connection to a pstrain job (the C++ Client).

Made by Client.connect(). One call at a time: calls from several threads wait for each other
(use a Client per thread, with distinct tasks, for parallel work). Every call releases the GIL
while it waits, and Ctrl-C interrupts it with KeyboardInterrupt (the interrupted call ends in
the background; the next call waits for it). Errors raise the pstrain.errors class of their
status with the C++ message. As a context manager, calls done() on exit, or done(error=...)
when the block raises.)")
      .def_static("connect", &PyClient::Connect, py::arg("chief") = py::none(),
                  py::arg("task") = py::none(), py::arg("timeout") = 60.0,
                  py::arg("push_dtype") = "float32", py::arg("transport") = "",
                  R"(Registers as worker `task` with the chief at `chief` ("host:port"); either
left None comes from TF_CONFIG. Waits until every task registered. `timeout` (seconds) bounds
the wait to reach the chief and every later call. `push_dtype`: "float32", or "float16" or
"bfloat16" to send dense gradients in half the bytes (rounded to nearest even; the PS keep
float32). `transport`: the data plane to the PS, "grpc", "tcp", "ucx" or "auto" (UCX where
the PS serve it); "" takes PSTRAIN_TRANSPORT (which `pstrain launch` sets to its --transport), else
"grpc". DeadlineExceededError if the chief cannot be reached in time; InvalidArgumentError for
a TF_CONFIG that does not parse, an unknown push_dtype or transport, or "tcp" or "ucx" with TLS.)")
      .def("create_variable", &PyClient::CreateVariable, py::arg("name"), py::arg("shape"),
           py::arg("initializer") = py::none(), py::arg("optimizer") = py::none(),
           py::arg("partitioner") = "",
           R"(Gets or creates a variable; returns its index in pull() and push(). An existing
variable keeps its values, initializer and optimizer; another shape is an
InvalidArgumentError. optimizer None: the chief's. partitioner: "none", "fixed:N",
"min_bytes:B", "max_bytes:B" or "" (the chief's). Arrays pulled before keep their values.)")
      .def(
          "pull", [](PyClient& c) { return c.Pull(); },
          R"(The values of every variable: float32 arrays of their shapes, in creation order.
Each owns a copy of the values (made without the GIL, in buffers that later pulls reuse once no
array holds them), valid for as long as the array lives whatever calls follow; writing into
one changes nothing on the PS. Sync mode: waits for the step after this client's last push.)")
      .def("push", &PyClient::Push, py::arg("grads"), py::arg("examples") = 0,
           py::arg("loss") = py::none(),
           R"(Pushes one gradient per variable, in creation order. Each is an array (or
anything numpy.asarray takes) of the variable's shape: float32 C-contiguous arrays are read in
place; float16/float64 and non-contiguous arrays are copied to float32; other dtypes raise
InvalidArgumentError. `examples` (the batch size) and `loss` feed the chief's progress.)")
      .def(
          "create_table",
          [](PyClient& c, const std::string& name, int dim, const py::object& initializer,
             const py::object& optimizer, int admit_after, bool unadmitted_zeros,
             int64_t evict_after_steps, int64_t max_rows_per_ps, int64_t max_bytes_per_ps) {
            return c.CreateTable({.name = name,
                                  .dim = dim,
                                  .admit_after = admit_after,
                                  .unadmitted_zeros = unadmitted_zeros,
                                  .evict_after_steps = evict_after_steps,
                                  .max_rows_per_ps = max_rows_per_ps,
                                  .max_bytes_per_ps = max_bytes_per_ps},
                                 initializer, optimizer);
          },
          py::arg("name"), py::arg("dim"), py::arg("initializer") = py::none(),
          py::arg("optimizer") = py::none(), py::arg("admit_after") = 0,
          py::arg("unadmitted_zeros") = false, py::arg("evict_after_steps") = 0,
          py::arg("max_rows_per_ps") = 0, py::arg("max_bytes_per_ps") = 0,
          R"(Gets or creates an embedding table of rows of `dim` floats keyed by uint64;
returns its index in lookup() and push_sparse(). Every worker must pass the same options.
optimizer None: Adagrad(lr=0.05). Arrays looked up before keep their values.)")
      .def(
          "lookup", [](PyClient& c, const py::sequence& keys) { return c.Lookup(keys); },
          py::arg("keys"),
          R"(keys[i]: distinct keys of table i (uint64 array, or non-negative integers).
Returns float32 arrays [len(keys[i]), dim] that own their values, as pull()'s do.)")
      .def("push_sparse", &PyClient::PushSparse, py::arg("keys"), py::arg("grads"),
           py::arg("examples") = 0, py::arg("loss") = py::none(),
           R"(Pushes gradient rows: grads[i] holds len(keys[i]) * dim floats (e.g. shape
[len(keys[i]), dim]) for the keys of table i; a repeated key's rows are summed.)")
      .def("barrier", &PyClient::Barrier, py::arg("name"),
           "Waits until every worker still training reached the barrier `name` (used once).")
      .def(
          "done",
          [](PyClient& c, const py::object& error) {
            c.Done(error.is_none()
                       ? std::nullopt
                       : std::optional<std::string>(py::str(error).cast<std::string>()));
          },
          py::arg("error") = py::none(),
          R"(Ends this worker's part of the job; with `error` (text or an exception) reports
that it failed, which ends the job. Later calls raise FailedPreconditionError.)")
      .def("__enter__", [](py::object self) { return self; })
      .def("__exit__", [](PyClient& c, const py::object& type, const py::object& value,
                          const py::object&) { return c.Exit(type, value); })
      .def_property_readonly("global_step", &PyClient::global_step,
                             "The smallest variable version the last pull read (sync: the "
                             "global step).")
      .def_property_readonly("pushes", &PyClient::pushes, "Steps pushed by this client.")
      .def_property_readonly("mode", &PyClient::mode, "The job's mode: async, sync or ssp.")
      .def_property_readonly("num_ps", &PyClient::num_ps, "The number of PS tasks.")
      .def_property_readonly("num_workers", &PyClient::num_workers,
                             "The number of worker tasks in the cluster (this one is `task`).")
      .def_property_readonly("task", &PyClient::task, "This worker's task index.")
      .def_property_readonly("has_tasks", &PyClient::has_tasks,
                             "Whether the job hands out tasks (its chief has --rows).")
      .def("_next_task", &PyClient::NextTask, py::arg("batch_size"))
      .def("_task_done", &PyClient::TaskDone)
      .def_property_readonly("_task_abandoned", &PyClient::TaskAbandoned)
      .def_property_readonly("data_plane", &PyClient::DataPlane,
                             "Per PS task, the transport its data channel took (\"grpc\" or "
                             "\"ucx\"); \"\" before the first pull or push made it.")
      .def("_last_pull_addresses", [](const PyClient& c) { return c.LastAddresses(false); })
      .def("_last_lookup_addresses", [](const PyClient& c) { return c.LastAddresses(true); })
      .def("_last_push_addresses", &PyClient::last_push)
      .def("_time_cpp_steps", &PyClient::TimeCppSteps, py::arg("steps"),
           "For benchmarks: seconds that `steps` pull + push of zeros take made from C++.")
      .def("__repr__", [](const PyClient& c) {
        return absl::StrCat("<pstrain.Client worker:", c.task(), " mode=", c.mode(),
                            " num_ps=", c.num_ps(), " num_workers=", c.num_workers(), ">");
      });
}

}  // namespace pstrain::python
