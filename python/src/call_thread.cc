#include "call_thread.h"

#include <thread>
#include <utility>

namespace py = pybind11;

namespace pstrain::python {
namespace {

// How long a waiting caller stays away from Python: the latency of Ctrl-C.
constexpr std::chrono::milliseconds kSlice(50);

}  // namespace

struct CallThread::State {
  std::mutex mu;
  std::condition_variable cv;
  std::function<void()> call;  // submitted, not yet started
  bool running = false;        // a call submitted and not yet ended
  bool held = false;           // a caller between submitting and taking the result
  bool stop = false;           // the owner is gone: exit once idle
  std::thread thread;
};

CallThread::CallThread() : state_(std::make_shared<State>()) {
  state_->thread = std::thread([s = state_] {
    std::unique_lock<std::mutex> lock(s->mu);
    for (;;) {
      s->cv.wait(lock, [&] { return s->call != nullptr || s->stop; });
      if (s->call == nullptr) return;  // stopped and idle
      std::function<void()> call = std::move(s->call);
      s->call = nullptr;
      lock.unlock();
      call();
      call = nullptr;  // what it holds goes here, off the caller's thread
      lock.lock();
      s->running = false;
      s->cv.notify_all();
    }
  });
}

CallThread::~CallThread() {
  bool busy;
  {
    std::lock_guard<std::mutex> lock(state_->mu);
    state_->stop = true;
    busy = state_->running;
    state_->cv.notify_all();
  }
  if (!busy) {
    py::gil_scoped_release release;
    state_->thread.join();
    return;
  }
  // The interrupted call still reads the memory of what it was given: leave it be.
  state_->thread.detach();
  interrupted_keep_alive_.release();
}

bool CallThread::busy() const {
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->running;
}

void CallThread::WaitInterruptibly(const std::function<bool()>& ready,
                                   const std::function<void()>& then) {
  State& s = *state_;
  for (;;) {
    bool done;
    {
      py::gil_scoped_release release;
      std::unique_lock<std::mutex> lock(s.mu);
      done = s.cv.wait_for(lock, kSlice, ready);
      if (done) then();
    }
    if (done) return;
    if (PyErr_CheckSignals() != 0) throw py::error_already_set();
  }
}

void CallThread::Run(std::function<void()> call, py::object keep_alive,
                     const std::function<void()>& after) {
  State& s = *state_;
  WaitInterruptibly([&] { return !s.held && !s.running; },
                    [&] {
                      s.held = true;
                      s.running = true;
                      s.call = std::move(call);
                      s.cv.notify_all();
                    });
  // The call before this one has ended: what it read may go.
  interrupted_keep_alive_ = py::none();
  auto release = [&s] {
    std::lock_guard<std::mutex> lock(s.mu);
    s.held = false;
    s.cv.notify_all();
  };
  try {
    WaitInterruptibly([&] { return !s.running; }, [] {});
  } catch (const py::error_already_set&) {
    interrupted_keep_alive_ = std::move(keep_alive);
    release();
    throw;
  }
  try {
    after();
  } catch (...) {
    release();
    throw;
  }
  release();
}

void WaitWithSignals(const std::function<bool(std::chrono::milliseconds slice)>& wait) {
  for (;;) {
    bool done;
    {
      py::gil_scoped_release release;
      done = wait(kSlice);
    }
    if (done) return;
    if (PyErr_CheckSignals() != 0) throw py::error_already_set();
  }
}

}  // namespace pstrain::python
