// A fixed pool of worker threads for data-parallel kernels. run(n_tasks, fn)
// hands out task indices through an atomic counter (so uneven tasks balance)
// and returns when all are done; the calling thread works too. Workers spin
// briefly before sleeping, because decode issues many short jobs per token.
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
  void work(int thread);

  int n_threads_;
  std::vector<std::thread> workers_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::atomic<uint64_t> generation_{0};
  std::atomic<int64_t> next_task_{0};
  std::atomic<int> n_active_{0};
  int64_t n_tasks_ = 0;
  const std::function<void(int64_t, int)>* fn_ = nullptr;
  bool stop_ = false;
};

}  // namespace spool
