// A fixed pool of worker threads for data-parallel kernels. run(n_tasks, fn)
// hands out task indices (so uneven tasks balance) and returns when every
// task is done; the calling thread works too, and never waits for a worker
// that has not started: a descheduled worker's share is simply taken by the
// others. Workers spin briefly before sleeping, because decode issues many
// short jobs per token.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace spool {

class ThreadPool {
 public:
  explicit ThreadPool(int n_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return n_threads_; }
  // fn(task, thread) for task in [0, n_tasks); thread in [0, size()).
  void run(int64_t n_tasks, const std::function<void(int64_t task, int thread)>& fn);

 private:
  void worker_loop(int thread);
  void work(uint64_t job, int thread);

  int n_threads_;
  std::vector<std::thread> workers_;
  std::mutex mu_;
  std::condition_variable cv_;
  // (job number << 32) | next task index: a claim succeeds only for the
  // current job, so a late worker can never take a task of a newer one.
  std::atomic<uint64_t> next_{0};
  std::atomic<int64_t> n_done_{0};
  std::atomic<int> n_sleeping_{0};
  // The current job's parameters, published by the store to next_. Atomic
  // (relaxed) because a late worker may read them while run() writes the next
  // job's; it then fails its claim and never uses what it read.
  std::atomic<int64_t> n_tasks_{0};
  std::atomic<const std::function<void(int64_t, int)>*> fn_{nullptr};
  uint64_t job_ = 0;
  std::atomic<bool> stop_{false};
};

}  // namespace spool
