// The "loaded" weight store: every tensor is read through Storage into memory
// when the model opens (no mmap), so it serves models whose files are URLs
// (HTTP Range requests) as well as local files. Tensors are read in spans of
// neighbouring tensors (one read() call each, which the HTTP backend splits
// into parallel ranges) and copied into their own buffers. Matmul weights get
// the kernels' packed copy, as in the resident store, and their plain bytes are
// then freed; a later row read (tied embeddings) reads them back once.
#include <algorithm>
#include <cstdlib>
#include <mutex>


#include "core/error.h"
#include "core/huge_alloc.h"
#include "storage/storage.h"
#include "weights/weight_store.h"

namespace spool {

namespace {

using Buffer = std::unique_ptr<uint8_t, FreeDeleter>;

// 64-byte aligned; buffers of 2 MiB and more are 2 MiB aligned and marked for
// transparent huge pages (weights are streamed once per token).
Buffer alloc_buffer(size_t bytes, const std::string& what) {
  void* p = alloc_huge(std::max<size_t>(bytes, 64));
  if (!p) throw Error("out of memory allocating " + std::to_string(bytes) + " bytes for " + what);
  return Buffer(static_cast<uint8_t*>(p));
}

constexpr uint64_t kSpanBytes = 128ull << 20;  // tensors read together per read() call

class LoadedStore final : public WeightStore {
 public:
  LoadedStore(Manifest m, const StorageOptions& options) : WeightStore(std::move(m)), slots_(manifest_.tensors.size()) {
    StorageOptions opt = options;
    opt.direct = false;  // reads land in buffers of any alignment
    for (size_t k = 0; k < manifest_.files.size(); ++k) {
      storages_.push_back(open_storage(manifest_.files[k], opt));
      if (storages_[k]->size() != manifest_.file_sizes[k])
        throw Error("'" + manifest_.files[k] + "' changed size since it was opened (" +
                    std::to_string(manifest_.file_sizes[k]) + " then, " + std::to_string(storages_[k]->size()) +
                    " bytes now)");
    }
    for (size_t k = 0; k < manifest_.files.size(); ++k) load_file((int)k);
  }

  const char* mode() const override { return "loaded (read into memory)"; }

  void prepare_matmul_weights(const std::vector<const TensorEntry*>& tensors, ThreadPool* pool) override {
    for (const TensorEntry* t : tensors) {
      if (t->shape.size() != 2) continue;
      Slot& s = slot(*t);
      if (s.packed) continue;
      {
        WeightRef ref = acquire(*t);
        const MatView mv = ref.mat();
        const size_t bytes = packed_matrix_bytes(mv);
        if (bytes == 0) continue;
        Buffer buf = alloc_buffer(bytes, "the packed copy of '" + t->name + "'");
        pack_matrix(mv, buf.get(), pool);
        s.packed = std::move(buf);
      }
      // Matmul reads the packed copy; the plain bytes come back if a row read needs them.
      if (t->memory) continue;
      std::lock_guard<std::mutex> lock(mu_);
      s.data.store(nullptr);
      s.owned.reset();
    }
  }

 protected:
  const void* pin(const TensorEntry& t) override {
    if (t.memory) return t.memory;
    Slot& s = slot(t);
    if (const void* p = s.data.load(std::memory_order_acquire)) return p;
    std::lock_guard<std::mutex> lock(mu_);
    if (const void* p = s.data.load(std::memory_order_acquire)) return p;
    Buffer buf = alloc_buffer(t.bytes, "tensor '" + t.name + "'");
    const ReadRequest r{t.offset, (size_t)t.bytes, buf.get()};
    storages_[t.file]->read({&r, 1});
    s.owned = std::move(buf);
    s.data.store(s.owned.get(), std::memory_order_release);
    return s.owned.get();
  }
  const void* packed(const TensorEntry& t) override { return slot(t).packed.get(); }

 private:
  struct Slot {
    std::atomic<const void*> data{nullptr};
    Buffer owned;
    Buffer packed;
  };

  Slot& slot(const TensorEntry& t) {
    const TensorEntry* base = manifest_.tensors.data();
    if (&t >= base && &t < base + manifest_.tensors.size()) return slots_[&t - base];
    return slots_[&manifest_.require(t.name) - base];  // an entry of another copy of the manifest
  }

  // Reads every tensor of file k: neighbours are read as one span into a
  // bounce buffer and copied out; a tensor larger than a span is read in place.
  void load_file(int k) {
    std::vector<size_t> order;
    for (size_t i = 0; i < manifest_.tensors.size(); ++i)
      if (manifest_.tensors[i].file == k && !manifest_.tensors[i].memory && manifest_.tensors[i].bytes > 0)
        order.push_back(i);
    std::sort(order.begin(), order.end(),
              [&](size_t a, size_t b) { return manifest_.tensors[a].offset < manifest_.tensors[b].offset; });
    Storage& st = *storages_[k];
    std::vector<uint8_t> bounce;
    for (size_t i = 0; i < order.size();) {
      const TensorEntry& first = manifest_.tensors[order[i]];
      if (first.bytes >= kSpanBytes) {
        Buffer buf = alloc_buffer(first.bytes, "tensor '" + first.name + "'");
        const ReadRequest r{first.offset, (size_t)first.bytes, buf.get()};
        st.read({&r, 1});
        set(order[i], std::move(buf));
        ++i;
        continue;
      }
      // Extend the span while the next tensor starts close by and the span stays small.
      uint64_t lo = first.offset, hi = first.offset + first.bytes;
      size_t j = i + 1;
      for (; j < order.size(); ++j) {
        const TensorEntry& t = manifest_.tensors[order[j]];
        const uint64_t end = std::max(hi, t.offset + t.bytes);
        if (t.offset > hi + 4096 || end - lo > kSpanBytes) break;
        hi = end;
      }
      bounce.resize(hi - lo);
      const ReadRequest r{lo, (size_t)(hi - lo), bounce.data()};
      st.read({&r, 1});
      for (size_t q = i; q < j; ++q) {
        const TensorEntry& t = manifest_.tensors[order[q]];
        Buffer buf = alloc_buffer(t.bytes, "tensor '" + t.name + "'");
        std::copy_n(bounce.data() + (t.offset - lo), t.bytes, buf.get());
        set(order[q], std::move(buf));
      }
      i = j;
    }
  }

  void set(size_t index, Buffer buf) {
    Slot& s = slots_[index];
    s.owned = std::move(buf);
    s.data.store(s.owned.get(), std::memory_order_release);
  }

  std::vector<std::unique_ptr<Storage>> storages_;
  std::vector<Slot> slots_;
  std::mutex mu_;
};

}  // namespace

std::unique_ptr<WeightStore> make_loaded_store(Manifest manifest, const StorageOptions& options) {
  return std::make_unique<LoadedStore>(std::move(manifest), options);
}

}  // namespace spool
