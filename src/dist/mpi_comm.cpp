// The MPI transport (dist/comm.h): MPI_COMM_WORLD, messages as MPI_BYTE
// arrays (size taken with MPI_Probe). Built only where CMake finds MPI
// (SPOOL_WITH_MPI); elsewhere mpi_world() says the build has none.
#include "core/error.h"
#include "dist/comm.h"

#include <atomic>

#if defined(SPOOL_WITH_MPI)
#include <mpi.h>

#include <chrono>
#include <climits>
#include <cstdlib>
#include <thread>
#endif

namespace spool::dist {

namespace {
std::atomic<bool> g_interrupted{false};
}  // namespace

void interrupt_waits() { g_interrupted.store(true); }

#if defined(SPOOL_WITH_MPI)

namespace {

[[noreturn]] void mpi_failed(const char* what, int rc) {
  char text[MPI_MAX_ERROR_STRING];
  int n = 0;
  MPI_Error_string(rc, text, &n);
  throw Error(std::string("MPI: ") + what + " failed: " + std::string(text, n));
}

class MpiWorld final : public Communicator {
 public:
  MpiWorld() {
    int inited = 0;
    MPI_Initialized(&inited);
    if (!inited) {
      int provided = 0;
      // One thread at a time calls MPI (the main thread, then the engine thread of serve).
      MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided);
      std::atexit([] {
        int finalized = 0;
        MPI_Finalized(&finalized);
        if (!finalized) MPI_Finalize();
      });
    }
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &size_);
    char name[MPI_MAX_PROCESSOR_NAME] = {};
    int len = 0;
    MPI_Get_processor_name(name, &len);
    std::vector<char> all((size_t)size_ * MPI_MAX_PROCESSOR_NAME);
    MPI_Allgather(name, MPI_MAX_PROCESSOR_NAME, MPI_CHAR, all.data(), MPI_MAX_PROCESSOR_NAME, MPI_CHAR, MPI_COMM_WORLD);
    for (int r = 0; r < size_; ++r) hosts_.emplace_back(all.data() + (size_t)r * MPI_MAX_PROCESSOR_NAME);
  }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  void send(int to, const std::vector<uint8_t>& bytes) override {
    if (bytes.size() > (size_t)INT_MAX) throw Error("MPI: a message of " + std::to_string(bytes.size()) + " bytes is too long");
    // Isend and polled, as recv: a large message waits for the receiver to take it, and a rank that
    // never does (stopped, dead) must not hold this one past interrupt_waits().
    MPI_Request req;
    int rc = MPI_Isend(bytes.data(), (int)bytes.size(), MPI_BYTE, to, 0, MPI_COMM_WORLD, &req);
    int done = 0;
    for (int polls = 0; rc == MPI_SUCCESS; ++polls) {
      rc = MPI_Test(&req, &done, MPI_STATUS_IGNORE);
      if (rc != MPI_SUCCESS || done) break;
      if (g_interrupted.load(std::memory_order_relaxed)) {
        MPI_Cancel(&req);
        throw Error("--dist ep: the job is ending (a rank died, or mpirun was stopped) while sending to rank " +
                    std::to_string(to) + " (" + host(to) + ")");
      }
      pause(polls);
    }
    if (rc != MPI_SUCCESS) mpi_failed(("send to rank " + std::to_string(to) + " (" + host(to) + ")").c_str(), rc);
  }
  std::vector<uint8_t> recv(int from) override {
    // Polled, not MPI_Probe: Open MPI's blocking calls spin a core while they
    // wait, and an idle rank (or the home rank waiting for answers) would take
    // the cores the others compute on.
    MPI_Status st;
    int flag = 0, rc = MPI_SUCCESS;
    for (int polls = 0;; ++polls) {
      rc = MPI_Iprobe(from, 0, MPI_COMM_WORLD, &flag, &st);
      if (rc != MPI_SUCCESS || flag) break;
      if (g_interrupted.load(std::memory_order_relaxed))
        throw Error("--dist ep: the job is ending (a rank died, or mpirun was stopped) while waiting for rank " +
                    std::to_string(from) + " (" + host(from) + ")");
      pause(polls);
    }
    if (rc != MPI_SUCCESS) mpi_failed(("receive from rank " + std::to_string(from) + " (" + host(from) + ")").c_str(), rc);
    int n = 0;
    MPI_Get_count(&st, MPI_BYTE, &n);
    std::vector<uint8_t> m((size_t)n);
    rc = MPI_Recv(m.data(), n, MPI_BYTE, from, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    if (rc != MPI_SUCCESS) mpi_failed(("receive from rank " + std::to_string(from) + " (" + host(from) + ")").c_str(), rc);
    return m;
  }
  // A short spin first keeps the latency of quick answers; then sleeps of up to 1 ms.
  static void pause(int polls) {
    if (polls >= 200) std::this_thread::sleep_for(std::chrono::microseconds(polls < 2000 ? 20 : 1000));
  }
  std::string host(int rank) const override {
    return rank >= 0 && rank < (int)hosts_.size() ? hosts_[rank] : std::string("?");
  }

 private:
  int rank_ = 0, size_ = 1;
  std::vector<std::string> hosts_;
};

}  // namespace

Communicator& mpi_world() {
  static MpiWorld* world = new MpiWorld();
  return *world;
}

#else

Communicator& mpi_world() {
  throw Error("this spool was built without MPI (install Open MPI or MPICH and rebuild) so --dist is not available");
}

#endif

}  // namespace spool::dist
