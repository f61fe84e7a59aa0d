// WeightRef plumbing and the resident (memory-mapped) weight store.
#include "weights/weight_store.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cstdlib>
#include <unordered_map>

#include "core/huge_alloc.h"
#include "core/error.h"
#include "storage/local_file.h"

namespace spool {

WeightRef& WeightRef::operator=(WeightRef&& o) noexcept {
  if (this != &o) {
    if (store_ && entry_) store_->unpin(*entry_);
    if (store_ && companion_) store_->unpin(*companion_);
    store_ = o.store_; entry_ = o.entry_; data_ = o.data_; packed_ = o.packed_;
    companion_ = o.companion_; companion_data_ = o.companion_data_;
    o.store_ = nullptr; o.entry_ = nullptr; o.data_ = nullptr; o.packed_ = nullptr;
    o.companion_ = nullptr; o.companion_data_ = nullptr;
  }
  return *this;
}

WeightRef::~WeightRef() {
  if (store_ && entry_) store_->unpin(*entry_);
  if (store_ && companion_) store_->unpin(*companion_);
}

WeightRef WeightStore::acquire(const TensorEntry& t) {
  WeightRef r(this, &t, pin(t), packed(t));
  if (!t.companion.empty()) {
    const TensorEntry& c = manifest_.require(t.companion);
    r.companion_data_ = pin(c);
    r.companion_ = &c;
  }
  return r;
}

MatView WeightRef::mat() const {
  MatView m;
  m.type = entry_->type;
  m.data = data_;
  m.n_cols = entry_->shape[0];
  m.n_rows = entry_->n_elements() / entry_->shape[0];
  m.packed = packed_;
  if (companion_) {
    m.block_scale = static_cast<const float*>(companion_data_);
    m.block_rows = entry_->block_rows;
    m.block_cols = entry_->block_cols;
    m.scale_cols = (m.n_cols + m.block_cols - 1) / m.block_cols;
  }
  return m;
}

const float* WeightRef::f32() const {
  if (entry_->type != DType::F32)
    throw Error("tensor '" + entry_->name + "' must be F32, is " + dtype_name(entry_->type));
  return static_cast<const float*>(data_);
}

namespace {

class ResidentStore final : public WeightStore {
 public:
  explicit ResidentStore(Manifest m) : WeightStore(std::move(m)) {
    for (const std::string& path : manifest_.files) maps_.push_back(std::make_unique<MappedFile>(path));
    for (size_t k = 0; k < maps_.size(); ++k)
      if (maps_[k]->size() != manifest_.file_sizes[k])
        throw Error("'" + manifest_.files[k] + "' changed size since it was opened");
  }
  const char* mode() const override { return "resident (mmap)"; }

  void prepare_matmul_weights(const std::vector<const TensorEntry*>& tensors, ThreadPool* pool) override {
    for (const TensorEntry* t : tensors) {
      // In-memory matrices (repacked int4, --convert) are not packed again:
      // the manifest keeps their bytes, so a packed copy would double them.
      if (packed_.count(t) || t->shape.size() != 2 || t->memory) continue;
      WeightRef ref = acquire(*t);
      const MatView mv = ref.mat();
      const size_t bytes = packed_matrix_bytes(mv);
      if (bytes == 0) continue;
      void* buf = alloc_huge(bytes);  // packed weights stream once per token: huge pages
      if (!buf) throw Error("out of memory packing '" + t->name + "'");
      pack_matrix(mv, buf, pool);
      packed_[t].reset(static_cast<uint8_t*>(buf));
      release_pages(*t);  // matmul reads the packed copy; rows read later fault back in
    }
  }

 protected:
  const void* pin(const TensorEntry& t) override {
    return t.memory ? t.memory : maps_[t.file]->data() + t.offset;
  }
  const void* packed(const TensorEntry& t) override {
    auto it = packed_.find(&t);
    return it == packed_.end() ? nullptr : it->second.get();
  }

 private:
  struct Free {
    void operator()(uint8_t* p) const { std::free(p); }
  };

  // Drops the whole pages inside a tensor's mapped bytes from this process.
  void release_pages(const TensorEntry& t) {
    const uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
    const uintptr_t begin = (uintptr_t)(maps_[t.file]->data() + t.offset), end = begin + t.bytes;
    const uintptr_t lo = (begin + page - 1) / page * page, hi = end / page * page;
    if (hi > lo) madvise((void*)lo, hi - lo, MADV_DONTNEED);
  }

  std::vector<std::unique_ptr<MappedFile>> maps_;
  std::unordered_map<const TensorEntry*, std::unique_ptr<uint8_t, Free>> packed_;
};

}  // namespace

std::unique_ptr<WeightStore> make_resident_store(Manifest manifest) {
  return std::make_unique<ResidentStore>(std::move(manifest));
}

}  // namespace spool
