// WeightRef plumbing and the resident (memory-mapped) weight store.
#include "weights/weight_store.h"

#include "core/error.h"
#include "storage/local_file.h"

namespace spool {

WeightRef& WeightRef::operator=(WeightRef&& o) noexcept {
  if (this != &o) {
    if (store_ && entry_) store_->unpin(*entry_);
    store_ = o.store_; entry_ = o.entry_; data_ = o.data_;
    o.store_ = nullptr; o.entry_ = nullptr; o.data_ = nullptr;
  }
  return *this;
}

WeightRef::~WeightRef() {
  if (store_ && entry_) store_->unpin(*entry_);
}

MatView WeightRef::mat() const {
  MatView m;
  m.type = entry_->type;
  m.data = data_;
  m.n_cols = entry_->shape[0];
  m.n_rows = entry_->n_elements() / entry_->shape[0];
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

 protected:
  const void* pin(const TensorEntry& t) override { return maps_[t.file]->data() + t.offset; }

 private:
  std::vector<std::unique_ptr<MappedFile>> maps_;
};

}  // namespace

std::unique_ptr<WeightStore> make_resident_store(Manifest manifest) {
  return std::make_unique<ResidentStore>(std::move(manifest));
}

}  // namespace spool
