// The KV disk tier: full prefix-cache blocks written to files under the data
// dir, so a prefix computed once is read back instead of recomputed after the
// pool evicted it or the process restarted (docs/ARCHITECTURE.md "KV disk tier").
//
// Layout: DIR/<model fingerprint>/<block key>.kvb, one file per block: a
// header (magic, version, fingerprint, key, parent key, block size, payload
// size, CRC-32 of header and of payload), the block's token ids, then its K
// rows of every layer and its V rows of every layer, as the pool holds them.
// The key is the prefix cache's chained hash, so a block is found by the same
// walk over a prompt's blocks; a load also checks the parent key and the token
// ids, and any file that is short, fails a checksum or names another model,
// key or block shape is deleted and reported (the prefix is recomputed, never
// used). Writes run on a thread of their own from a bounded queue of copies:
// decode never waits for the disk (a write that does not fit the queue is
// dropped and counted). The tier keeps its files within max_bytes, evicting
// the least recently used (loads count as use; file times carry the order
// across restarts), other models' files included.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <list>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

namespace spool {

class Model;
struct KvShape;

// What a file holds: a KV block, or (hybrid models) the recurrent state at
// the end of the block of the same key, a state snapshot.
enum class KvDiskKind { Block, State };

struct KvDiskOptions {
  std::string dir;               // the tier's root (e.g. DATA_DIR/kv)
  uint64_t max_bytes = 0;        // files kept within this; must be > 0
  uint64_t fingerprint = 0;      // what the KV was computed by (kv_fingerprint)
  int block_size = 16;           // positions per block
  uint64_t block_bytes = 0;      // payload bytes per block (K then V of every layer)
  uint64_t state_bytes = 0;      // payload bytes per state snapshot (hybrid models; 0: none)
  uint64_t max_pending_bytes = 256ull << 20;  // queued copies at most; more are dropped
};

struct KvDiskStats {
  uint64_t files = 0, bytes = 0;            // on disk now (every model)
  uint64_t writes = 0, write_bytes = 0;     // blocks written since start
  uint64_t writes_dropped = 0;              // queue full: not written
  uint64_t write_errors = 0;                // the disk refused (full, read-only, ...)
  uint64_t pending = 0;                     // queued, not yet written
  uint64_t hits = 0, hit_bytes = 0;         // blocks loaded instead of recomputed
  double load_seconds = 0;                  // time spent loading them
  uint64_t rejected = 0;                    // files found bad on load and deleted
  uint64_t evicted = 0;                     // files deleted to stay within max_bytes
};

// Identity of the KV a model computes: its metadata, tensor table, a sample
// of its weight bytes (local files), the cache's element type and shape, the
// block size and the kernels' instruction set (results are exact per ISA).
uint64_t kv_fingerprint(const Model& model, const KvShape& shape, int block_size);

class KvDiskTier;
// The tier for model's KV under dir (its files within max_bytes), with
// blocks of block_size positions of the model's KV shape.
std::unique_ptr<KvDiskTier> make_kv_disk_tier(const Model& model, const std::string& dir, uint64_t max_bytes,
                                              int block_size);

class KvDiskTier {
 public:
  // Creates dir if needed, indexes the files there (deleting leftovers of
  // interrupted writes) and starts the writer. Throws spool::Error if the
  // directory cannot be made.
  explicit KvDiskTier(KvDiskOptions options);
  ~KvDiskTier();  // writes what is queued, then stops
  KvDiskTier(const KvDiskTier&) = delete;
  KvDiskTier& operator=(const KvDiskTier&) = delete;

  bool contains(uint64_t key, KvDiskKind kind = KvDiskKind::Block) const;
  // Queues the block (its K and V spans are copied now) unless it is on disk
  // or queued already. Never waits for I/O. A state snapshot's bytes go in k
  // (v empty).
  void store(uint64_t key, uint64_t parent, std::span<const int32_t> tokens, std::span<const uint8_t> k,
             std::span<const uint8_t> v, KvDiskKind kind = KvDiskKind::Block);
  // Reads key's block into k and v (the pool's spans of one block) if its file
  // is whole and holds this parent and these tokens; false otherwise (the
  // block must then be recomputed; a bad file is deleted with a log line).
  bool load(uint64_t key, uint64_t parent, std::span<const int32_t> tokens, std::span<uint8_t> k,
            std::span<uint8_t> v, KvDiskKind kind = KvDiskKind::Block);
  // Asks the kernel to start reading these blocks' files (those on disk), so
  // that loading them one after the other does not wait for each in turn.
  void will_load(std::span<const uint64_t> keys);
  void flush();  // returns once everything queued so far is written (or failed)
  KvDiskStats stats() const;
  const KvDiskOptions& options() const { return opt_; }
  std::string path_of(uint64_t key, KvDiskKind kind = KvDiskKind::Block) const;  // where key's file lives

 private:
  struct Job {
    std::string path;
    std::vector<uint8_t> bytes;  // header, tokens, payload: the whole file
  };
  struct FileEntry {
    std::string path;
    uint64_t bytes;
  };
  void writer_loop();
  void write_one(Job& job);
  void index_add(const std::string& path, uint64_t bytes);  // as most recent; mu_ held
  void touch(const std::string& path);                      // most recent; mu_ held
  void forget(const std::string& path);                     // mu_ held
  void enforce_budget();                                    // mu_ held
  void drop_bad(const std::string& path, const std::string& why);

  KvDiskOptions opt_;
  std::string model_dir_;
  mutable std::mutex mu_;
  std::condition_variable cv_, idle_cv_;
  std::deque<Job> queue_;
  std::unordered_map<std::string, bool> queued_;  // paths in queue_ or being written
  uint64_t pending_bytes_ = 0;
  bool writing_ = false, stop_ = false;
  uint64_t tmp_seq_ = 0;  // writer thread only
  std::list<FileEntry> lru_;  // front = least recently used
  std::unordered_map<std::string, std::list<FileEntry>::iterator> files_;
  KvDiskStats stats_;
  std::thread writer_;
};

}  // namespace spool
