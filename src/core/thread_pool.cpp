// Jobs are published through next_ (job number in the high half); workers
// claim tasks with compare-and-swap on it and count finished tasks in
// n_done_, which the caller waits on. Sleeping workers are woken through the
// condition variable only when some are actually asleep.
#include "core/thread_pool.h"

#include <sched.h>

#if defined(__x86_64__)
#include <immintrin.h>
#define SPOOL_PAUSE() _mm_pause()
#elif defined(__aarch64__)
#define SPOOL_PAUSE() asm volatile("yield")
#else
#define SPOOL_PAUSE() ((void)0)
#endif

namespace spool {
namespace {

constexpr int kSpinsBeforeSleep = 100000;  // about a millisecond of pause
constexpr int kSpinsBeforeYield = 2000;    // the caller waiting for a running task

uint64_t job_of(uint64_t v) { return v >> 32; }

}  // namespace

ThreadPool::ThreadPool(int n_threads) : n_threads_(n_threads < 1 ? 1 : n_threads) {
  for (int t = 1; t < n_threads_; ++t) workers_.emplace_back([this, t] { worker_loop(t); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_.store(true);
    next_.fetch_add(1ull << 32);  // a new "job" wakes the spinners
  }
  cv_.notify_all();
  for (auto& w : workers_) w.join();
}

// Claims and runs tasks of `job` until none remain (or the job is over).
void ThreadPool::work(uint64_t job, int thread) {
  uint64_t v = next_.load(std::memory_order_acquire);
  if (job_of(v) != job) return;
  // The job's parameters, read after seeing it published. A claim below
  // succeeds only while the job is still current, so these are its values.
  const int64_t n_tasks = n_tasks_.load(std::memory_order_relaxed);
  const std::function<void(int64_t, int)>* fn = fn_.load(std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_acquire);
  for (;;) {
    if (job_of(v) != job) return;
    const int64_t task = (int64_t)(v & 0xffffffffu);
    if (task >= n_tasks) return;
    if (!next_.compare_exchange_weak(v, v + 1, std::memory_order_acq_rel, std::memory_order_acquire)) continue;
    (*fn)(task, thread);
    n_done_.fetch_add(1, std::memory_order_release);
    v = next_.load(std::memory_order_acquire);
  }
}

void ThreadPool::run(int64_t n_tasks, const std::function<void(int64_t, int)>& fn) {
  if (n_tasks <= 0) return;
  if (n_threads_ == 1 || n_tasks == 1) {
    for (int64_t i = 0; i < n_tasks; ++i) fn(i, 0);
    return;
  }
  // Close the previous job first: a worker that read its (exhausted) counter
  // must not be able to claim through it once n_tasks_ and fn_ change below
  // (that claim would run a stale task and count it in the new job's n_done_).
  ++job_;
  next_.store((job_ << 32) | 0xffffffffu, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_seq_cst);
  fn_.store(&fn, std::memory_order_relaxed);
  n_tasks_.store(n_tasks, std::memory_order_relaxed);
  n_done_.store(0, std::memory_order_relaxed);
  ++job_;
  next_.store(job_ << 32, std::memory_order_seq_cst);  // publishes fn_ and n_tasks_; seq_cst pairs with n_sleeping_
  if (n_sleeping_.load(std::memory_order_seq_cst) > 0) {
    std::lock_guard<std::mutex> lock(mu_);
    cv_.notify_all();
  }
  work(job_, 0);
  for (int spin = 0; n_done_.load(std::memory_order_acquire) != n_tasks; ++spin) {
    if (spin < kSpinsBeforeYield) SPOOL_PAUSE();
    else sched_yield();  // a worker is mid-task; let it run if it shares our core
  }
}

void ThreadPool::worker_loop(int thread) {
  uint64_t seen = 0;
  for (;;) {
    uint64_t job = job_of(next_.load(std::memory_order_acquire));
    for (int spin = 0; job == seen && spin < kSpinsBeforeSleep; ++spin) {
      SPOOL_PAUSE();
      job = job_of(next_.load(std::memory_order_acquire));
    }
    if (job == seen) {
      std::unique_lock<std::mutex> lock(mu_);
      n_sleeping_.fetch_add(1, std::memory_order_seq_cst);
      cv_.wait(lock, [&] { return job_of(next_.load(std::memory_order_seq_cst)) != seen; });
      n_sleeping_.fetch_sub(1, std::memory_order_relaxed);
      job = job_of(next_.load(std::memory_order_acquire));
    }
    seen = job;
    if (stop_.load()) return;
    work(job, thread);
  }
}

}  // namespace spool
