// The streaming weight store (see streaming_store.h): residency plan, slot
// cache with pins and eviction, I/O threads, counters.
#include "weights/streaming_store.h"

#include <sys/mman.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <set>
#include <thread>
#include <tuple>
#include <unordered_map>

#include "core/error.h"
#include "weights/checksums.h"
#include "weights/cache_policy.h"

namespace spool {
namespace {

uint64_t now_ns() {
  return (uint64_t)std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch()).count();
}
uint64_t round_up(uint64_t x, uint64_t a) { return (x + a - 1) / a * a; }
uint64_t round_down(uint64_t x, uint64_t a) { return x / a * a; }

std::string mib(uint64_t b) {
  char s[32];
  std::snprintf(s, sizeof s, "%.1f MiB", b / 1048576.0);
  return s;
}

// "blk.N." -> N; -1 for tensors outside the layers.
int layer_of(const std::string& name) {
  if (!name.starts_with("blk.")) return -1;
  return std::atoi(name.c_str() + 4);
}

// Weight memory: large buffers are their own anonymous mappings (returned to
// the system when freed, whatever malloc's trim thresholds; 2 MiB aligned
// and marked for transparent huge pages), small ones come from malloc.
class Buffer {
 public:
  Buffer() = default;
  Buffer(uint8_t* p, size_t size, bool mapped) : p_(p), size_(size), mapped_(mapped) {}
  Buffer(Buffer&& o) noexcept { *this = std::move(o); }
  Buffer& operator=(Buffer&& o) noexcept {
    if (this != &o) {
      reset();
      std::swap(p_, o.p_), std::swap(size_, o.size_), std::swap(mapped_, o.mapped_);
    }
    return *this;
  }
  ~Buffer() { reset(); }
  uint8_t* get() const { return p_; }
  explicit operator bool() const { return p_ != nullptr; }
  void reset() {
    if (p_ && mapped_) munmap(p_, size_);
    else if (p_) std::free(p_);
    p_ = nullptr;
    size_ = 0;
  }

 private:
  uint8_t* p_ = nullptr;
  size_t size_ = 0;
  bool mapped_ = false;
};

// huge: the arena (2 MiB aligned, huge pages); otherwise page granular, so
// a resident tensor costs its bytes rounded to 4 KiB and no more.
Buffer alloc_aligned(uint64_t bytes, uint64_t align, bool huge = false) {
  constexpr uint64_t kHuge = 2u << 20;
  if (bytes >= kHuge && !huge) {
    const uint64_t size = round_up(bytes, 4096);
    void* p = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) throw Error("out of memory allocating " + mib(size) + " of weight memory");
    return Buffer(static_cast<uint8_t*>(p), size, true);
  }
  if (bytes >= kHuge) {
    const uint64_t size = round_up(bytes, kHuge);
    // Over-map by one huge page and trim, so the buffer starts 2 MiB aligned.
    void* raw = mmap(nullptr, size + kHuge, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (raw == MAP_FAILED) throw Error("out of memory allocating " + mib(size) + " of weight memory");
    const uintptr_t start = round_up((uintptr_t)raw, kHuge);
    if (start > (uintptr_t)raw) munmap(raw, start - (uintptr_t)raw);
    const uintptr_t end = (uintptr_t)raw + size + kHuge;
    if (end > start + size) munmap((void*)(start + size), end - (start + size));
#ifdef MADV_HUGEPAGE
    madvise((void*)start, size, MADV_HUGEPAGE);
#endif
    return Buffer((uint8_t*)start, size, true);
  }
  const uint64_t a = std::max<uint64_t>(align, 64);
  void* p = std::aligned_alloc(a, round_up(std::max<uint64_t>(bytes, 1), a));
  if (!p) throw Error("out of memory allocating " + mib(bytes) + " of weight memory");
  return Buffer(static_cast<uint8_t*>(p), bytes, false);
}

// One file range of a unit and where its aligned superset lands in the unit's buffer.
struct Piece {
  const TensorEntry* t = nullptr;
  uint64_t a_off = 0, a_len = 0;  // aligned superset in the file
  uint64_t buf_off = 0;           // where a_off lands in the buffer
};

// What is read together: one expert (3 slices) or one tensor.
struct Unit {
  std::vector<Piece> pieces;
  uint64_t bytes = 0;  // buffer bytes needed
  int layer = 0;       // index into stats layers (n_layer: outside the layers)
  bool expert = false;
  int expert_id = -1;
  int slot = -1;       // cache slot holding it, -1 when not cached
  bool queued = false;
};

enum class SlotState { Empty, Loading, Ready };

struct Slot {
  uint8_t* mem = nullptr;
  int unit = -1;
  SlotState state = SlotState::Empty;
  int pins = 0;
  bool unused_prefetch = false;  // loaded ahead, not looked up yet
  uint64_t loading_since = 0;    // when its read began (state Loading)
  CacheMeta meta;
};

struct Pool {
  uint64_t slot_bytes = 0;
  std::vector<int> slots;  // indices into slots_
  int quota = 0;           // slots per layer before the layer must evict its own
};

// Where a tensor is: resident memory, or a streamed unit.
struct Where {
  const uint8_t* data = nullptr;
  const void* packed = nullptr;
  int unit = -1;
  uint64_t offset = 0;  // of the tensor's first byte in its unit's buffer
};

class StreamingStoreImpl final : public StreamingStore {
 public:
  StreamingStoreImpl(Manifest m, const StreamingOptions& o) : StreamingStore(std::move(m)), opt_(o) {
    for (const std::string& f : manifest_.files) storage_.push_back(open_storage(f, opt_.storage));
    sums_ = load_checksums_for(manifest_);  // MODEL.sums next to the file: every read is checked (checksums.h)
    for (size_t k = 0; k < storage_.size(); ++k) {
      if (storage_[k]->size() != manifest_.file_sizes[k])
        throw Error("'" + manifest_.files[k] + "' changed size since it was opened");
      align_ = std::max(align_, storage_[k]->alignment());
    }
    where_.resize(manifest_.tensors.size());
    for (const TensorEntry& t : manifest_.tensors) n_layer_ = std::max(n_layer_, layer_of(t.name) + 1);
    stats_.layers.resize(n_layer_ + 1);
    build_units();
  }

  ~StreamingStoreImpl() override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    io_cv_.notify_all();
    for (std::thread& t : io_threads_) t.join();
  }

  const char* mode() const override { return "streaming"; }
  bool streaming() const override { return true; }

  void prepare_matmul_weights(const std::vector<const TensorEntry*>& tensors, ThreadPool*) override {
    for (const TensorEntry* t : tensors) matmul_.insert(t);
  }

  // The least room for tensors over the slot sizes choose_residency() tries
  // (tensors larger than the slot resident, kMinTensorSlots slots of it),
  // plus the expert slots.
  uint64_t minimum_budget() const override {
    if (opt_.experts_only) return expert_minimum();
    std::set<uint64_t> sizes = {0};
    for (int u : tensor_units_) sizes.insert(slot_size(u));
    uint64_t best = UINT64_MAX;
    for (uint64_t m : sizes) {
      uint64_t need = kMinTensorSlots * m;
      for (int u : tensor_units_)
        if (slot_size(u) > m) need += resident_cost(u);
      best = std::min(best, need);
    }
    return best + expert_minimum();
  }

  void set_min_expert_slots(int n) override {
    if (n > 0) opt_.min_expert_slots = n;
  }

  void start(uint64_t budget, ThreadPool* pool) override {
    SPOOL_CHECK(!started_);
    plan(budget);
    const double t0 = now_ns() * 1e-9;
    load_resident(pool);
    if (opt_.verbose)
      std::fprintf(stderr, "spool: debug: resident set %s read in %.2f s\n", mib(stats_.resident_bytes).c_str(),
                   now_ns() * 1e-9 - t0);
    started_ = true;
    if (!pools_[0].slots.empty() || !pools_[1].slots.empty())
      for (int i = 0; i < std::max(1, opt_.io_threads); ++i) io_threads_.emplace_back([this] { io_loop(); });
  }

  void prefetch(const std::vector<const TensorEntry*>& tensors) override {
    std::vector<int> units = units_of(tensors);
    std::lock_guard<std::mutex> lock(mu_);
    score_guess(units);
    enqueue(units, high_);
  }

  void will_use_layer(int layer) override {
    std::lock_guard<std::mutex> lock(mu_);
    if (layer == 0) {  // a forward pass starts
      adapt_guessing();
      drop_queued();  // what the last pass queued and never looked up is not this pass's
    }
    current_layer_ = layer - 1;
    if (layer >= 0 && layer < (int)layer_units_.size()) enqueue(layer_units_[layer], low_);
  }

  void will_use_experts_of(int layer) override {
    std::lock_guard<std::mutex> lock(mu_);
    current_layer_ = layer - 1;  // protects read-aheads of `layer - 1` and `layer` (is_protected)
  }

  // Guessing needs room for two layers' experts at once (this layer's and the
  // guess); with fewer slots a guess only pushes out what this layer is using.
  bool wants_expert_guess() const override {
    return opt_.speculate && guess_on_.load(std::memory_order_relaxed) &&
           (int)pools_[0].slots.size() >= 2 * opt_.min_expert_slots;
  }

  // Guessing pays only while reads can hide behind compute. When the last
  // pass spent most of its time waiting for reads the disk is the bottleneck
  // and a wrong guess costs its whole read (measured: ~0.47 GB a token at 81 %
  // accuracy on a 12.7 GB Kimi-shaped file at 2G with the disk capped), so
  // guessing stops until waits fall well below that again. Caller holds mu_.
  void adapt_guessing() {
    const uint64_t now = now_ns();
    if (opt_.adapt_speculation && pass_start_ns_ != 0 && now > pass_start_ns_) {
      const double waited = (double)(stats_.io_wait_ns - pass_wait_ns_) / (double)(now - pass_start_ns_);
      guess_on_ = speculation_after_pass(guess_on_, waited);
    }
    pass_start_ns_ = now;
    pass_wait_ns_ = stats_.io_wait_ns;
  }

  void guess_experts(const std::vector<const TensorEntry*>& tensors) override {
    std::vector<int> units = units_of(tensors);
    std::lock_guard<std::mutex> lock(mu_);
    for (int u : units) {
      guess_[units_[u].layer].insert(units_[u].expert_id);
      ++stats_.spec_predicted;
    }
    enqueue(units, low_);
  }

  void set_read_stall_ms(int ms) override { read_stall_ms_.store(std::max(0, ms), std::memory_order_relaxed); }

  bool read_pending(int unit) const override {
    std::lock_guard<std::mutex> lock(mu_);
    if (unit < 0 || unit >= (int)units_.size()) return false;
    const int slot = units_[unit].slot;
    return units_[unit].queued || (slot >= 0 && slots_[slot].unit == unit && slots_[slot].state == SlotState::Loading);
  }

  StoreStats stats_snapshot() const override {
    std::lock_guard<std::mutex> lock(mu_);
    std::lock_guard<std::mutex> lock2(stats_mu_);
    StoreStats s = stats_;
    for (const auto& st : storage_) s.read_retries += st->retries();
    return s;
  }

 protected:
  const void* pin(const TensorEntry& t) override {
    const Where& w = where_[index(t)];
    if (w.unit < 0) return w.data;
    if (!started_) return early_pin(t);
    Unit& u = units_[w.unit];
    if (opt_.experts_only && !u.expert)
      throw Error("tensor '" + t.name + "' is not loaded: this weight store holds only the routed experts");
    const bool first = u.pieces.front().t == &t;  // a unit's lookup is counted on its first tensor
    std::unique_lock<std::mutex> lock(mu_);
    const uint64_t tick = ++tick_;
    // Under a read-stall limit an expert queued for the reading thread stays
    // queued (waited for below, bounded); otherwise the lookup reads it itself.
    const int stall_ms = read_stall_ms_.load(std::memory_order_relaxed);
    const bool bounded = stall_ms > 0 && u.expert;
    if (!(bounded && u.queued)) cancel_read_ahead(w.unit);
    last_lookup_[u.expert ? 0 : 1] = w.unit;
    uint64_t waited_from = 0;
    for (;;) {
      if (u.slot >= 0) {
        Slot& s = slots_[u.slot];
        if (s.state == SlotState::Ready) {
          if (first && !waited_from) ++(s.unused_prefetch ? stats_.layers[u.layer].prefetched : stats_.layers[u.layer].hits);
          if (first) policy_->on_access(s.meta, tick);
          s.unused_prefetch = false;
          ++s.pins;
          if (waited_from) add_wait(u.layer, now_ns() - waited_from);
          return s.mem + w.offset;
        }
        // A prefetch is reading it: wait (pinned, so it stays).
        if (!waited_from) {
          waited_from = now_ns();
          if (first) ++stats_.layers[u.layer].inflight;
        }
        ++s.pins;
        const int slot = u.slot;
        const auto landed = [&] { return slots_[slot].state != SlotState::Loading; };
        if (bounded) {
          while (!landed()) {
            if (read_stalled(u, stall_ms)) {
              --slots_[slot].pins;
              give_up(u, w.unit, waited_from, stall_ms);
            }
            ready_cv_.wait_for(lock, std::chrono::milliseconds(std::max(1, stall_ms / 8)));
          }
        } else {
          ready_cv_.wait(lock, landed);
        }
        --slots_[slot].pins;
        if (slots_[slot].state != SlotState::Ready || slots_[slot].unit != w.unit) continue;  // the read failed
        continue;
      }
      if (bounded && u.queued) {  // the reading thread will take it, unless its current read is stalled:
        if (!waited_from) waited_from = now_ns();
        if (read_stalled(u, stall_ms)) cancel_read_ahead(w.unit);  // then this thread reads it
        else ready_cv_.wait_for(lock, std::chrono::milliseconds(1));
        continue;
      }
      const int victim = pick_victim(u, true);
      if (victim < 0) {  // every slot pinned or loading: wait for one
        if (!waited_from) waited_from = now_ns();
        ready_cv_.wait(lock);
        continue;
      }
      if (!waited_from) waited_from = now_ns();
      if (first) ++stats_.layers[u.layer].misses;
      Slot& s = claim(victim, w.unit, tick);
      s.pins = 1;
      lock.unlock();
      try {
        read_unit(u, s.mem);
      } catch (...) {
        lock.lock();
        release_failed(victim);
        throw;
      }
      lock.lock();
      s.state = SlotState::Ready;
      add_wait(u.layer, now_ns() - waited_from);
      ready_cv_.notify_all();
      return s.mem + w.offset;
    }
  }

  // Whether the read unit u waits for has been in flight longer than the
  // stall limit: its own read, or, while it is queued, the reading thread's
  // current one (a slow but moving queue is not a stall). Caller holds mu_.
  bool read_stalled(const Unit& u, int stall_ms) const {
    const uint64_t now = now_ns(), limit = (uint64_t)stall_ms * 1000000ull;
    int slot = -1;
    if (u.slot >= 0 && slots_[u.slot].state == SlotState::Loading) slot = u.slot;
    else if (u.queued) slot = io_slot_;
    return slot >= 0 && now - slots_[slot].loading_since > limit;
  }

  [[noreturn]] void give_up(const Unit& u, int unit, uint64_t waited_from, int stall_ms) {
    add_wait(u.layer, now_ns() - waited_from);
    ++stats_.read_stalls;
    throw ReadStalled("the read of " + describe(u) + " has been in flight for over " + std::to_string(stall_ms) + " ms",
                      unit);
  }

  // Compute waited `ns` for a read of `layer` (under mu_).
  void add_wait(int layer, uint64_t ns) {
    stats_.io_wait_ns += ns;
    stats_.layers[layer].wait_ns += ns;
  }

  void unpin(const TensorEntry& t) override {
    const Where& w = where_[index(t)];
    if (w.unit < 0 || !started_) return;
    std::lock_guard<std::mutex> lock(mu_);
    Slot& s = slots_[units_[w.unit].slot];
    if (--s.pins == 0) ready_cv_.notify_all();
  }

  const void* packed(const TensorEntry& t) override { return where_[index(t)].packed; }

 private:
  // The most units compute pins at once in each pool: three tensors (the dense
  // FFN over several token chunks holds gate, up and down; attention holds two)
  // and one expert (moe_forward runs one expert at a time, its gate, up and
  // down being one unit). The tensor pool never has fewer slots than that.
  // Outside a long prompt's dense FFN, two tensors (demand_reserve).
  static constexpr int kMinTensorSlots = 3;
  static constexpr int kMaxTensorPins = 2;
  static constexpr int kMaxExpertPins = 1;

  size_t index(const TensorEntry& t) const { return (size_t)(&t - manifest_.tensors.data()); }

  uint64_t expert_minimum() const {
    return expert_units_.empty() ? 0 : (uint64_t)opt_.min_expert_slots * expert_slot_bytes_;
  }

  // Pieces of one range, placed at buffer offset `at` (aligned); returns the end.
  uint64_t place(Unit& u, const TensorEntry& t, uint64_t at) {
    Piece p;
    p.t = &t;
    p.a_off = round_down(t.offset, align_);
    p.a_len = round_up(t.offset + t.bytes, align_) - p.a_off;
    p.buf_off = round_up(at, std::max<uint64_t>(align_, 64));
    where_[index(t)].offset = p.buf_off + (t.offset - p.a_off);
    u.pieces.push_back(p);
    return p.buf_off + p.a_len;
  }

  void build_units() {
    std::map<std::pair<int, int>, int> expert_unit;  // (layer, expert) -> unit
    layer_units_.resize(n_layer_ + 1);
    for (const TensorEntry& t : manifest_.tensors) {
      if (t.memory || t.file < 0) {
        where_[index(t)].data = static_cast<const uint8_t*>(t.memory);
        continue;
      }
      const int layer = layer_of(t.name);
      const int li = layer < 0 ? n_layer_ : layer;
      int ui;
      if (t.expert >= 0) {
        auto [it, fresh] = expert_unit.try_emplace({li, t.expert}, (int)units_.size());
        if (fresh) {
          units_.emplace_back();
          units_.back().layer = li;
          units_.back().expert = true;
          units_.back().expert_id = t.expert;
          expert_units_.push_back(it->second);
        }
        ui = it->second;
      } else {
        ui = (int)units_.size();
        units_.emplace_back();
        units_.back().layer = li;
        tensor_units_.push_back(ui);
        layer_units_[li].push_back(ui);
      }
      Unit& u = units_[ui];
      u.bytes = place(u, t, u.bytes);
      where_[index(t)].unit = ui;
    }
    for (int u : expert_units_) expert_slot_bytes_ = std::max(expert_slot_bytes_, round_up(units_[u].bytes, 4096));
  }

  // Resident cost of a tensor unit: its packed copy when it gets one (plus the
  // raw bytes for the embedding, read by row), else its aligned bytes.
  uint64_t resident_cost(int ui) const {
    const Unit& u = units_[ui];
    const TensorEntry* t = u.pieces.front().t;
    const uint64_t pk = packed_bytes(*t);
    if (pk == 0) return round_up(u.bytes, 4096);
    return round_up(pk, 4096) + (t->name == "token_embd.weight" ? round_up(u.bytes, 4096) : 0);
  }

  uint64_t packed_bytes(const TensorEntry& t) const {
    if (!opt_.pack_resident || !matmul_.count(&t) || t.shape.size() != 2) return 0;
    MatView mv;
    mv.type = t.type;
    mv.n_cols = t.shape[0];
    mv.n_rows = t.shape[1];
    return packed_matrix_bytes(mv);
  }

  // A residency choice: tensors read once at start, and the tensor slot size
  // (the largest streamed tensor; 0 when nothing streams).
  struct Residency {
    std::vector<int> resident, streamed;
    uint64_t resident_bytes = 0, tensor_slot = 0, streamed_bytes = 0;
  };

  uint64_t slot_size(int u) const { return round_up(units_[u].bytes, 4096); }

  // The residency for `room` bytes (after the expert minimum) with streamed
  // tensors of at most `max_slot` bytes: every larger tensor must be resident
  // (false when they do not fit); then the rest of the room is filled largest
  // first with the smaller ones, so as many of the bytes every token reads stay
  // in memory as the room allows.
  bool fill(uint64_t room, uint64_t max_slot, Residency& r) const {
    r = Residency{};
    if (room < kMinTensorSlots * max_slot) return false;
    room -= kMinTensorSlots * max_slot;
    std::vector<int> order = tensor_units_;  // largest first (ties: file order)
    std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return units_[a].bytes > units_[b].bytes; });
    for (int u : order) {
      const uint64_t cost = resident_cost(u);
      if (slot_size(u) > max_slot) {
        if (r.resident_bytes + cost > room) return false;
      } else if (r.resident_bytes + cost > room) {
        r.streamed.push_back(u);
        r.streamed_bytes += units_[u].bytes;
        r.tensor_slot = std::max(r.tensor_slot, slot_size(u));
        continue;
      }
      r.resident.push_back(u);
      r.resident_bytes += cost;
    }
    return true;
  }

  // Of the slot sizes that fit, the one that leaves the fewest bytes to
  // stream (ties: the smaller tensor pool); everything resident when it fits.
  bool choose_residency(uint64_t budget, Residency& best) const {
    const uint64_t exp_min = expert_minimum();
    if (exp_min > budget) return false;
    std::set<uint64_t> sizes = {0};
    for (int u : tensor_units_) sizes.insert(slot_size(u));
    bool found = false;
    for (uint64_t m : sizes) {
      Residency r;
      if (!fill(budget - exp_min, m, r)) continue;
      if (r.streamed.empty()) r.tensor_slot = 0;
      if (!found || r.streamed_bytes < best.streamed_bytes ||
          (r.streamed_bytes == best.streamed_bytes && r.tensor_slot < best.tensor_slot))
        best = std::move(r), found = true;
      if (found && best.streamed.empty()) break;
    }
    return found;
  }

  void plan(uint64_t budget) {
    stats_.budget_bytes = budget;
    Residency r;
    if (opt_.experts_only ? expert_minimum() > budget : !choose_residency(budget, r))
      throw Error("memory budget too small: the weights need at least " + mib(minimum_budget()) +
                  (expert_minimum() ? " (with " + std::to_string(opt_.min_expert_slots) + " expert slots of " +
                                          mib(expert_slot_bytes_) + ")"
                                    : std::string()) +
                  ", " + mib(budget) + " are left for them after KV cache and scratch");
    const uint64_t resident = r.resident_bytes, tensor_slot = r.tensor_slot;
    resident_set_ = r.resident;
    const std::vector<int> streamed = r.streamed;
    uint64_t left = budget - resident;
    int n_tensor_slots = 0, n_expert_slots = 0;
    if (!streamed.empty()) {
      n_tensor_slots = kMinTensorSlots;
      left -= kMinTensorSlots * tensor_slot;
    }
    if (!expert_units_.empty()) {
      n_expert_slots = (int)std::min<uint64_t>(left / expert_slot_bytes_, expert_units_.size());
      left -= n_expert_slots * expert_slot_bytes_;
    }
    if (streamed.size() > (size_t)kMinTensorSlots)  // what the experts do not need goes to more tensor slots
      n_tensor_slots += (int)std::min<uint64_t>(left / tensor_slot, streamed.size() - kMinTensorSlots);
    // Streamed tensors leave the layer lists only if resident.
    std::set<int> res(resident_set_.begin(), resident_set_.end());
    for (auto& list : layer_units_)
      list.erase(std::remove_if(list.begin(), list.end(), [&](int u) { return res.count(u) > 0; }), list.end());

    pools_[0].slot_bytes = expert_slot_bytes_;
    pools_[1].slot_bytes = tensor_slot;
    const uint64_t arena = n_expert_slots * expert_slot_bytes_ + n_tensor_slots * tensor_slot;
    // Huge pages when their rounding still fits the budget.
    if (arena) arena_ = alloc_aligned(arena, 4096, round_up(arena, 2u << 20) + resident <= budget);
    uint8_t* p = arena_.get();
    for (int k = 0; k < n_expert_slots + n_tensor_slots; ++k) {
      const int pool = k < n_expert_slots ? 0 : 1;
      slots_.emplace_back();
      slots_.back().mem = p;
      p += pools_[pool].slot_bytes;
      pools_[pool].slots.push_back(k);
    }
    int moe_layers = 0;
    {
      std::set<int> layers;
      for (int u : expert_units_) layers.insert(units_[u].layer);
      moe_layers = (int)layers.size();
    }
    pools_[0].quota = moe_layers ? std::max(1, n_expert_slots / moe_layers) : n_expert_slots;
    pools_[1].quota = n_tensor_slots;  // tensors share their pool freely (LRU order is layer order)
    const int lookups = (int)slots_.size() + 64;
    policy_ = make_cache_policy(opt_.policy, 4.0 * lookups);
    stats_.arena_bytes = arena;
    stats_.expert_slots = n_expert_slots;
    stats_.tensor_slots = n_tensor_slots;
    stats_.expert_slot_bytes = expert_slot_bytes_;
    stats_.tensor_slot_bytes = tensor_slot;
    uint64_t streamed_bytes = 0;
    for (int u : streamed) streamed_bytes += units_[u].bytes;
    stats_.streamed_tensor_bytes = streamed_bytes;
    std::fprintf(stderr,
                 "spool: streaming: budget %s for weights: %zu tensors resident (%s), %zu streamed (%s) in %d slots "
                 "of %s; %zu experts streamed in %d slots of %s (policy %s)%s\n",
                 mib(budget).c_str(), resident_set_.size(), mib(resident).c_str(), streamed.size(),
                 mib(streamed_bytes).c_str(), n_tensor_slots, mib(tensor_slot).c_str(), expert_units_.size(),
                 n_expert_slots, mib(expert_slot_bytes_).c_str(), policy_->name(),
                 opt_.experts_only ? "; routed experts only" : "");
  }

  void load_resident(ThreadPool* pool) {
    for (int ui : resident_set_) {
      const uint64_t t0 = now_ns();
      Unit& u = units_[ui];
      const TensorEntry& t = *u.pieces.front().t;
      Where& w = where_[index(t)];
      Buffer raw;
      if (auto it = early_.find(&t); it != early_.end()) {
        raw = std::move(it->second);
        early_.erase(it);
      } else {
        raw = alloc_aligned(u.bytes, std::max<uint64_t>(align_, 4096));
        read_unit(u, raw.get());
      }
      stats_.load_bytes += u.bytes;
      const uint64_t pk = packed_bytes(t);
      w.data = raw.get() + w.offset;
      w.unit = -1;
      if (pk) {
        Buffer packed = alloc_aligned(pk, 64);
        MatView mv;
        mv.type = t.type;
        mv.data = w.data;
        mv.n_cols = t.shape[0];
        mv.n_rows = t.shape[1];
        pack_matrix(mv, packed.get(), pool);
        w.packed = packed.get();
        owned_.push_back(std::move(packed));
        // Only the embedding is read by row; the other packed matrices drop their raw bytes.
        if (t.name != "token_embd.weight") {
          raw.reset();
          w.data = nullptr;
        }
      }
      if (raw) owned_.push_back(std::move(raw));
      stats_.resident_bytes += resident_cost(ui);
      if (opt_.verbose)
        std::fprintf(stderr, "spool: debug: load %-40s %10s %s %.1f ms\n", t.name.c_str(), mib(u.bytes).c_str(),
                     pk ? "packed" : "raw", (now_ns() - t0) * 1e-6);
    }
    for (auto& [t, buf] : early_) owned_.push_back(std::move(buf));  // tensors read before start() stay
    early_.clear();
  }

  // Before start(): a constructor reads a tensor (rope factors); kept in memory until start() files it.
  const void* early_pin(const TensorEntry& t) {
    SPOOL_CHECK(!started_);
    auto it = early_.find(&t);
    if (it == early_.end()) {
      Unit u;
      u.bytes = 0;
      u.layer = n_layer_;  // counted outside the layers
      Piece p;
      p.t = &t;
      p.a_off = round_down(t.offset, align_);
      p.a_len = round_up(t.offset + t.bytes, align_) - p.a_off;
      u.pieces.push_back(p);
      Buffer b = alloc_aligned(p.a_len, std::max<uint64_t>(align_, 4096));
      read_unit(u, b.get());
      it = early_.emplace(&t, std::move(b)).first;
    }
    return it->second.get() + (t.offset - round_down(t.offset, align_));
  }

  // Checks a tensor's bytes against MODEL.sums; a mismatch fails the read.
  void verify(const TensorEntry& t, const uint8_t* data) const {
    auto it = sums_.crc.find(t.name);
    if (it == sums_.crc.end()) return;
    const uint32_t got = crc32_of(data, t.bytes);
    if (got == it->second) return;
    char msg[64];
    std::snprintf(msg, sizeof msg, "crc32 %08x, expected %08x", got, it->second);
    throw Error("checksum mismatch in tensor '" + t.name + "' bytes [" + std::to_string(t.offset) + ", " +
                std::to_string(t.offset + t.bytes) + ") of '" + manifest_.files[t.file] + "': " + msg +
                " (from '" + sums_.path + "'): the read or the file is corrupt");
  }

  // What a unit holds, for error messages: its tensors (expert slices with
  // their expert) and their byte ranges in the file.
  std::string describe(const Unit& u) const {
    std::string out = u.expert ? "expert " + std::to_string(u.expert_id) + " of " : "";
    for (size_t i = 0; i < u.pieces.size(); ++i) {
      const TensorEntry& t = *u.pieces[i].t;
      out += (i ? ", " : "") + std::string("tensor '") + t.name + "' bytes [" + std::to_string(t.offset) + ", " +
             std::to_string(t.offset + t.bytes) + ") of '" + manifest_.files[t.file] + "'";
    }
    return out;
  }

  // One Storage::read for a unit's aligned ranges; the part of a range past
  // the last whole aligned block of the file is read unaligned.
  void read_unit(const Unit& u, uint8_t* buf) {
    std::vector<std::vector<ReadRequest>> per_file(storage_.size());
    std::vector<std::tuple<int, uint64_t, size_t, uint8_t*>> tails;
    uint64_t bytes = 0, payload = 0;  // as read (aligned ranges); the tensors' own bytes
    for (const Piece& p : u.pieces) {
      Storage& s = *storage_[p.t->file];
      uint64_t a_end = p.a_off + p.a_len;
      uint8_t* dst = buf + p.buf_off;
      if (a_end > s.size()) {
        const uint64_t whole = std::max(p.a_off, round_down(s.size(), align_));
        tails.emplace_back(p.t->file, whole, (size_t)(s.size() - whole), dst + (whole - p.a_off));
        a_end = whole;
      }
      if (a_end > p.a_off) per_file[p.t->file].push_back({p.a_off, (size_t)(a_end - p.a_off), dst});
      bytes += p.a_len;
      payload += p.t->bytes;
    }
    uint64_t requests = 0;
    const uint64_t t0 = now_ns();
    try {
      for (size_t f = 0; f < per_file.size(); ++f)
        if (!per_file[f].empty()) storage_[f]->read(per_file[f]), ++requests;
      for (auto& [f, off, n, dst] : tails) storage_[f]->read_unaligned(off, n, dst), ++requests;
    } catch (const std::exception& e) {
      throw Error("cannot read " + describe(u) + ": " + e.what());
    }
    const uint64_t ns = now_ns() - t0;
    uint64_t verify_ns = 0, verified = 0;
    if (!sums_.crc.empty()) {
      const uint64_t v0 = now_ns();
      for (const Piece& p : u.pieces) verify(*p.t, buf + p.buf_off + (p.t->offset - p.a_off));
      verify_ns = now_ns() - v0;
      for (const Piece& p : u.pieces) verified += p.t->bytes;
    }
    std::lock_guard<std::mutex> lock(stats_mu_);
    stats_.bytes_read += bytes;
    stats_.payload_bytes += payload;
    stats_.requests += requests;
    stats_.verify_ns += verify_ns;
    stats_.verified_bytes += verified;
    if (u.layer >= 0 && u.layer < (int)stats_.layers.size()) {
      stats_.layers[u.layer].read_ns += ns;
      stats_.layers[u.layer].read_bytes += bytes;
    }
  }

  std::vector<int> units_of(const std::vector<const TensorEntry*>& tensors) const {
    std::vector<int> out;
    for (const TensorEntry* t : tensors) {
      const int u = where_[index(*t)].unit;
      if (u >= 0 && std::find(out.begin(), out.end(), u) == out.end()) out.push_back(u);
    }
    return out;
  }

  // The batch's actual experts against the guess made for their layer.
  void score_guess(const std::vector<int>& units) {
    if (units.empty()) return;
    auto it = guess_.find(units_[units.front()].layer);
    if (it == guess_.end()) return;
    for (int u : units) {
      if (!units_[u].expert) continue;
      ++stats_.spec_routed;
      if (it->second.count(units_[u].expert_id)) ++stats_.spec_correct;
    }
    guess_.erase(it);
  }

  void enqueue(const std::vector<int>& units, std::deque<int>& q) {
    bool any = false;
    for (int u : units) {
      Unit& x = units_[u];
      if (x.slot >= 0 || x.queued) continue;
      x.queued = true;
      q.push_back(u);
      ++stats_.prefetch_issued;
      any = true;
    }
    if (any) io_cv_.notify_all();
  }

  // A lookup of u fulfils any read-ahead of it still queued: the unit is in a
  // slot now (or being read on demand). Left in the queue, the entry would be
  // read again by an I/O thread that runs late (a loaded machine) once compute
  // has used the unit and moved on and the unit has been evicted: a second read
  // of a unit the pass no longer needs, which also evicts one it does need.
  void cancel_read_ahead(int u) {
    if (!units_[u].queued) return;
    for (std::deque<int>* q : {&high_, &low_})
      if (auto it = std::find(q->begin(), q->end(), u); it != q->end()) q->erase(it);
    units_[u].queued = false;
    ++stats_.prefetch_dropped;
  }

  void drop_queued() {
    for (std::deque<int>* q : {&high_, &low_}) {
      for (int u : *q) units_[u].queued = false;
      stats_.prefetch_dropped += q->size();
      q->clear();
    }
  }

  bool is_protected(const Slot& s) const {
    if (!s.unused_prefetch) return false;
    const int l = units_[s.unit].layer;
    return l == current_layer_ || l == current_layer_ + 1 || (current_layer_ < 0 && l == n_layer_);
  }

  // Slots of a pool that read-aheads leave to demand reads: as many as compute
  // pins at once. Read-aheads (loading or landed, not yet looked up) then hold
  // at most the pool's other slots, so a demand read, holding fewer pins than
  // this, always finds a slot that is free or holds a unit compute has used
  // and released. Without the reserve, read-aheads could fill every slot with
  // units the pass still needs (the next layer's, or this layer's in file
  // order, which is not the order compute uses them), and a demand read would
  // evict one of them (passes 3 and 4 of pick_victim): a second read of it,
  // certain, in a pass that should read each unit once. Tensors: attention and
  // decode pin at most two at once, so a pool of kMinTensorSlots keeps one
  // slot reading ahead (the next matrix's read overlaps this one's compute).
  // Only a prompt pass of more than kFfnTokenChunk tokens through a dense FFN
  // pins three; there a demand read may still take a read-ahead's slot (one
  // re-read, the price of keeping decode's read-ahead at the smallest pool).
  // Experts: gate and up, then down; one slot.
  int demand_reserve(int pool) const { return pool == 0 ? kMaxExpertPins : kMaxTensorPins; }

  // A slot for unit u: a free one, else the policy's choice among evictable
  // slots, restricted to u's layer once that layer holds its quota. -1 if none.
  // A read-ahead (demand false) takes a free or used slot only while the
  // pool's read-aheads leave the demand reserve; beyond it, it may only
  // replace a read-ahead nobody protects any more (a past layer's). It never
  // evicts the unit of the latest lookup: compute may be between two pins of
  // it (an expert's gate and up, then its down).
  int pick_victim(const Unit& u, bool demand) {
    const int pi = u.expert ? 0 : 1;
    const Pool& pool = pools_[pi];
    int own = 0, ahead = 0, empty = -1;
    std::vector<int> per_layer(n_layer_ + 1, 0);
    for (int k : pool.slots) {
      const Slot& s = slots_[k];
      if (s.state == SlotState::Empty) {
        if (empty < 0) empty = k;
        continue;
      }
      if (s.unused_prefetch) ++ahead;
      ++per_layer[units_[s.unit].layer];
      if (units_[s.unit].layer == u.layer) ++own;
    }
    const bool room = demand || ahead < (int)pool.slots.size() - demand_reserve(pi);
    if (empty >= 0 && room) return empty;
    const uint64_t now = tick_;
    int best = -1;
    double best_score = 0;
    for (int pass = 0; pass < 5 && best < 0; ++pass) {
      // pass 0: own layer if over quota; 1: layers over quota; 2: any unprotected; demand only:
      // 3: reads ahead for a later layer (speculation), 4: reads ahead for this layer (a re-read is certain).
      if (pass == 0 && own < pool.quota) continue;
      if (pass == 3 && !demand) break;
      for (int k : pool.slots) {
        const Slot& s = slots_[k];
        if (s.state != SlotState::Ready || s.pins > 0) continue;
        if (!demand && ((!room && !s.unused_prefetch) || s.unit == last_lookup_[pi])) continue;
        if (pass < 3 && is_protected(s)) continue;
        const int l = units_[s.unit].layer;
        if (pass == 3 && l == u.layer) continue;
        if (pass == 0 && l != u.layer) continue;
        if (pass == 1 && per_layer[l] <= pool.quota) continue;
        const double score = policy_->keep_score(s.meta, now);
        if (best < 0 || score < best_score) best = k, best_score = score;
      }
    }
    return best;
  }

  Slot& claim(int k, int unit, uint64_t tick) {
    Slot& s = slots_[k];
    if (s.unit >= 0) {
      units_[s.unit].slot = -1;
      ++stats_.evictions;
    }
    s.unit = unit;
    s.state = SlotState::Loading;
    s.loading_since = now_ns();
    s.pins = 0;
    s.unused_prefetch = false;
    policy_->on_insert(s.meta, tick);
    units_[unit].slot = k;
    return s;
  }

  void release_failed(int k) {
    Slot& s = slots_[k];
    units_[s.unit].slot = -1;
    s.unit = -1;
    s.state = SlotState::Empty;
    s.pins = 0;
    s.unused_prefetch = false;
    ready_cv_.notify_all();
  }

  void io_loop() {
    std::unique_lock<std::mutex> lock(mu_);
    for (;;) {
      io_cv_.wait(lock, [&] { return stop_ || !high_.empty() || !low_.empty(); });
      if (stop_) return;
      std::deque<int>& q = high_.empty() ? low_ : high_;
      const int ui = q.front();
      q.pop_front();
      Unit& u = units_[ui];
      u.queued = false;
      if (u.slot >= 0) continue;
      if (u.layer < current_layer_) {  // compute has gone past its layer: it would be read for nothing
        ++stats_.prefetch_dropped;
        continue;
      }
      const int victim = pick_victim(u, false);
      if (victim < 0) {
        ++stats_.prefetch_dropped;
        continue;
      }
      Slot& s = claim(victim, ui, ++tick_);
      s.unused_prefetch = true;
      io_slot_ = victim;
      lock.unlock();
      bool ok = true;
      try {
        read_unit(u, s.mem);
      } catch (const std::exception& e) {
        ok = false;  // the demand read will report it
        if (opt_.verbose) std::fprintf(stderr, "spool: debug: prefetch failed: %s\n", e.what());
      }
      lock.lock();
      io_slot_ = -1;
      if (ok) {
        s.state = SlotState::Ready;
        ready_cv_.notify_all();
      } else {
        release_failed(victim);
      }
    }
  }

  StreamingOptions opt_;
  std::vector<std::unique_ptr<Storage>> storage_;
  TensorChecksums sums_;
  uint64_t align_ = 1;
  int n_layer_ = 0;
  std::vector<Where> where_;                 // by manifest index
  std::vector<Unit> units_;
  std::vector<int> expert_units_, tensor_units_, resident_set_;
  std::vector<std::vector<int>> layer_units_;  // streamed tensor units by layer
  uint64_t expert_slot_bytes_ = 0;
  std::set<const TensorEntry*> matmul_;
  std::unordered_map<const TensorEntry*, Buffer> early_;
  std::vector<Buffer> owned_;
  Buffer arena_;
  std::vector<Slot> slots_;
  Pool pools_[2];  // experts, tensors
  std::unique_ptr<CachePolicy> policy_;
  bool started_ = false;

  mutable std::mutex mu_;
  mutable std::mutex stats_mu_;  // bytes_read/requests (read_unit runs without mu_); taken after mu_
  std::condition_variable ready_cv_, io_cv_;
  std::deque<int> high_, low_;
  std::vector<std::thread> io_threads_;
  std::map<int, std::set<int>> guess_;  // layer -> guessed experts
  int current_layer_ = -1;
  int last_lookup_[2] = {-1, -1};  // unit of the latest pin() per pool (experts, tensors)
  std::atomic<bool> guess_on_{true};
  uint64_t pass_start_ns_ = 0, pass_wait_ns_ = 0;
  std::atomic<int> read_stall_ms_{0};
  int io_slot_ = -1;  // the slot the reading thread is filling (under mu_)
  uint64_t tick_ = 0;
  bool stop_ = false;
  StoreStats stats_;
};

}  // namespace

bool speculation_after_pass(bool on, double io_wait_share) {
  constexpr double kOffAbove = 0.6, kOnBelow = 0.3;
  if (io_wait_share > kOffAbove) return false;
  if (io_wait_share < kOnBelow) return true;
  return on;
}

std::unique_ptr<StreamingStore> make_streaming_store(Manifest manifest, const StreamingOptions& options) {
  return std::make_unique<StreamingStoreImpl>(std::move(manifest), options);
}

}  // namespace spool
