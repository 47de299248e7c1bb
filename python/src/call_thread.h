// Blocking C++ calls made interruptible for Python: each runs on a thread of its own while the
// Python caller waits with the GIL released, waking every few milliseconds to let Python run
// its signal handlers, so Ctrl-C raises KeyboardInterrupt even when the call cannot be
// cancelled. An interrupted call ends in the background; the next call waits for it.
#pragma once

#include <pybind11/pybind11.h>

#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>

namespace pstrain::python {

// One thread that runs the calls of one owner (a Client), one at a time, in order. Callers from
// several Python threads are serialized: a call starts once the previous one has ended and its
// caller has taken the result.
class CallThread {
 public:
  CallThread();
  // Joins the thread if it is idle; otherwise leaves it to end the running call and exit on its
  // own (it keeps what the call needs alive) and leaks `keep_alive` of the interrupted call.
  ~CallThread();
  CallThread(const CallThread&) = delete;
  CallThread& operator=(const CallThread&) = delete;

  // Runs `call` on the thread and waits for it, the GIL released, then runs `after` (with the
  // GIL) before another caller's call may start, so `after` may read what `call` wrote. Must be
  // called with the GIL held; `call` must not touch Python objects nor throw. On a Python
  // exception from a signal handler (KeyboardInterrupt) throws pybind11::error_already_set
  // while `call` goes on running; `keep_alive` (Python objects whose memory `call` reads) is
  // then kept until it has ended.
  void Run(
      std::function<void()> call, pybind11::object keep_alive = pybind11::none(),
      const std::function<void()>& after = [] {});

  // Whether a call is running (one that was interrupted, or another thread's).
  bool busy() const;

 private:
  struct State;
  // Waits with the GIL released until `ready()` holds (then runs `then()` under the lock),
  // returning to Python every slice to run signal handlers; throws error_already_set if one
  // raised. Called with the GIL held.
  void WaitInterruptibly(const std::function<bool()>& ready, const std::function<void()>& then);

  std::shared_ptr<State> state_;
  pybind11::object interrupted_keep_alive_;  // of an interrupted call that may still run
};

// Runs `wait(slice)` (which returns true once done) with the GIL released until it returns
// true, running Python's signal handlers between slices; throws error_already_set if one
// raised. For waits that are not calls on a CallThread (a server's join).
void WaitWithSignals(const std::function<bool(std::chrono::milliseconds slice)>& wait);

}  // namespace pstrain::python
