// The connections of a task's HTTP listener (runtime/http_listener.h). One thread polls every
// connection: it accepts, reads request heads and writes responses without blocking, and hands
// each whole head to a small pool of threads that answer it in memory. A client that sends or
// reads slowly therefore holds a connection slot, never a thread, and the slots are capped per
// peer address and in all. Internal to src/runtime.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace pstrain {

// The listener's limits; docs/metrics.md states them.
struct HttpLimits {
  // Open connections of one peer address, and of all peers. A connection past a cap takes the
  // slot of the connection (of that peer, or of any) that has been idle longest, unless every
  // one is being answered; the connection that loses its slot, or the new one when none can,
  // gets 503 and is closed.
  int max_per_peer = 32;
  int max_total = 256;
  // A whole request head must arrive within this time of the connection's opening (or of the
  // previous response on a kept-alive connection), else 408 (or, to a connection that sent
  // nothing, a close); a response must be taken by the peer within write_timeout.
  absl::Duration head_timeout = absl::Seconds(5);
  absl::Duration write_timeout = absl::Seconds(5);
  // Bytes of a head read at most: a longer one is answered as it stands (a 400).
  size_t max_head_bytes = 64 * 1024;
  // Requests answered on one connection before it is closed.
  int max_requests_per_connection = 100;
  // Threads that answer whole requests.
  int answer_threads = 2;
};

struct HttpPeer {
  std::string ip;
  int port = 0;
  std::string local_ip;
  int local_port = 0;
  int fd = -1;  // the connection's socket, for reference only: never read or written by answers
};

// Answers one request into `*response` (the bytes to send). `head` is the request line and the
// headers up to the empty line (at most max_head_bytes, cut there if longer); `last`: the
// connection closes after this response. Returns whether the connection may stay open. Runs on
// the pool's threads, several at once.
using HttpAnswer = std::function<bool(std::string_view head, const HttpPeer& peer, bool last,
                                      std::string* response)>;

// A socket bound to host:port (0 picks a free port) and listening; FailedPrecondition naming the
// address when it cannot be. `*bound_port` is the port taken.
absl::StatusOr<int> ListenTcp(const std::string& host, int port, int* bound_port);

class HttpConnections {
 public:
  // Owns `listen_fd` (a listening socket, as ListenTcp makes).
  HttpConnections(int listen_fd, HttpLimits limits, HttpAnswer answer);
  // Stops: joins the threads (waiting for answers in progress), closes every connection.
  ~HttpConnections();
  HttpConnections(const HttpConnections&) = delete;
  HttpConnections& operator=(const HttpConnections&) = delete;

  // Starts the poll thread and the answer threads; connections wait in the listen backlog until
  // then.
  void Start();

 private:
  enum class State { kReading, kAnswering, kWriting, kDraining };
  struct Conn {
    int fd = -1;
    HttpPeer peer;
    State state = State::kReading;
    std::string in;   // read, not yet answered
    std::string out;  // the response being written
    size_t sent = 0;
    bool close_after = false;  // the response being written is the last
    int answered = 0;
    absl::Time deadline;     // of the head, the response or the drain
    absl::Time last_active;  // the last byte read or written: the idlest loses its slot
  };
  struct Job {
    uint64_t id;
    std::string head;
    HttpPeer peer;
    bool last;
  };
  struct Answered {
    uint64_t id;
    std::string response;
    bool keep;
  };

  // The poll thread and what it calls; conns_ and per_peer_ are its own.
  void PollLoop();
  void AcceptAll(absl::Time now);
  bool MakeRoom(const std::string& ip, absl::Time now);
  void Read(uint64_t id, absl::Time now);
  void Dispatch(uint64_t id, absl::Time now);
  void Write(uint64_t id, absl::Time now);
  void TakeAnswers(absl::Time now);
  void Expire(absl::Time now);
  // Sends `reply` if the socket takes it at once, then closes the connection.
  void Refuse(uint64_t id, const std::string& reply);
  void Close(uint64_t id);
  void AnswerLoop();
  void Wake();

  // Constant after construction.
  const int listen_fd_;
  const int wake_fd_;  // an eventfd: answers ready, or stopping
  const HttpLimits limits_;
  const HttpAnswer answer_;

  // The poll thread's.
  std::map<uint64_t, Conn> conns_;
  absl::flat_hash_map<std::string, int> per_peer_;  // open connections by peer address
  uint64_t next_id_ = 1;
  absl::Time accept_paused_until_ = absl::InfinitePast();  // out of descriptors

  std::mutex mu_;
  std::condition_variable jobs_cv_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::deque<Job> jobs_ ABSL_GUARDED_BY(mu_);
  std::vector<Answered> answered_ ABSL_GUARDED_BY(mu_);

  std::thread poll_thread_;
  std::vector<std::thread> answer_threads_;
};

}  // namespace pstrain
