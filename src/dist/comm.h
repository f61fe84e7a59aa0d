// The transport of the distributed modes (--dist): a group of processes
// ("ranks") that send each other messages of bytes. MPI in a build that has
// it (dist/mpi_comm.cpp, launched with mpirun); threads of one process
// otherwise, for the tests (local_group).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace spool::dist {

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // Sends a message to rank `to`; returns once `bytes` may be reused (the
  // receiver may not have taken it yet). Messages between two ranks arrive in order.
  virtual void send(int to, const std::vector<uint8_t>& bytes) = 0;
  // The next message from rank `from` (blocks until there is one).
  virtual std::vector<uint8_t> recv(int from) = 0;
  // The host a rank runs on, for messages that name a rank.
  virtual std::string host(int rank) const = 0;
};

// The MPI world of this process (MPI_Init on the first call, MPI_Finalize at
// exit). Throws spool::Error in a build without MPI.
Communicator& mpi_world();

// The process is ending (mpirun sends SIGTERM to every rank when one dies,
// or the job is stopped): every wait of mpi_world()'s recv(), now or later,
// gives up and throws spool::Error naming the rank it waited for, so that the
// requests in flight fail with a message instead of hanging until mpirun's
// SIGKILL. Any thread.
void interrupt_waits();

// `n` communicators of one group in this process, rank i at index i, for
// ranks run as threads (tests).
std::vector<std::unique_ptr<Communicator>> local_group(int n);

}  // namespace spool::dist
