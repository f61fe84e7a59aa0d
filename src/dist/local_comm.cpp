// Ranks as threads of one process (dist/comm.h local_group): one queue per
// ordered pair of ranks.
#include <condition_variable>
#include <deque>
#include <mutex>

#include "dist/comm.h"

namespace spool::dist {

namespace {

struct Mailboxes {
  explicit Mailboxes(int n) : n(n), queues(n * n) {}
  int n;
  std::mutex mu;
  std::condition_variable cv;
  std::vector<std::deque<std::vector<uint8_t>>> queues;  // [to * n + from]
};

class LocalComm final : public Communicator {
 public:
  LocalComm(std::shared_ptr<Mailboxes> box, int rank) : box_(std::move(box)), rank_(rank) {}
  int rank() const override { return rank_; }
  int size() const override { return box_->n; }
  void send(int to, const std::vector<uint8_t>& bytes) override {
    {
      std::lock_guard<std::mutex> lock(box_->mu);
      box_->queues[(size_t)to * box_->n + rank_].push_back(bytes);
    }
    box_->cv.notify_all();
  }
  std::vector<uint8_t> recv(int from) override {
    std::unique_lock<std::mutex> lock(box_->mu);
    auto& q = box_->queues[(size_t)rank_ * box_->n + from];
    box_->cv.wait(lock, [&] { return !q.empty(); });
    std::vector<uint8_t> m = std::move(q.front());
    q.pop_front();
    return m;
  }
  std::string host(int rank) const override { return "thread " + std::to_string(rank); }

 private:
  std::shared_ptr<Mailboxes> box_;
  int rank_;
};

}  // namespace

std::vector<std::unique_ptr<Communicator>> local_group(int n) {
  auto box = std::make_shared<Mailboxes>(n);
  std::vector<std::unique_ptr<Communicator>> out;
  for (int i = 0; i < n; ++i) out.push_back(std::make_unique<LocalComm>(box, i));
  return out;
}

}  // namespace spool::dist
