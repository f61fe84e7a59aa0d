// The simple per-sequence KV cache: each sequence owns [n_layer][n_ctx] rows
// of K and of V, allocated lazily so unused sequence slots cost nothing, on
// huge pages and untouched until used (core/huge_alloc.h).
#include "model/kv_cache.h"

#include <string>

#include "core/error.h"
#include "core/huge_alloc.h"

namespace spool {
namespace {

class SimpleKvCache final : public KvCache {
 public:
  SimpleKvCache(const KvShape& shape, int n_ctx, int max_seqs)
      : shape_(shape), n_ctx_(n_ctx), seqs_(max_seqs) {
    init_recurrent(shape, max_seqs);
  }

  const KvShape& shape() const override { return shape_; }
  int n_ctx() const override { return n_ctx_; }

  void reserve(int seq, int n_pos) override {
    if (seq < 0 || seq >= (int)seqs_.size())
      throw Error("sequence id " + std::to_string(seq) + " out of range (max " + std::to_string(seqs_.size()) + ")");
    if (n_pos > n_ctx_)
      throw Error("context full: " + std::to_string(n_pos) + " positions needed, context size is " +
                  std::to_string(n_ctx_) + " (raise -c)");
    Seq& s = seqs_[seq];
    if (!s.k) {
      s.k_bytes = (size_t)shape_.n_layer * n_ctx_ * shape_.k_row() * shape_.elem_bytes();
      s.v_bytes = (size_t)shape_.n_layer * n_ctx_ * shape_.v_row() * shape_.elem_bytes();
      s.k = make_huge_array<uint8_t>(s.k_bytes);
      if (s.v_bytes > 0) s.v = make_huge_array<uint8_t>(s.v_bytes);
    }
    if (recurrent_) recurrent_->ensure(seq);
  }

  KvSeqView view(int layer, int seq) override {
    Seq& s = seqs_[seq];
    SPOOL_CHECK(s.k != nullptr);
    KvSeqView v;
    v.block_size = n_ctx_;
    v.k_row = shape_.k_row();
    v.v_row = shape_.v_row();
    v.elem_bytes = shape_.elem_bytes();
    v.k_blocks.push_back(s.k.get() + (size_t)layer * n_ctx_ * v.k_row * v.elem_bytes);
    v.v_blocks.push_back(s.v ? s.v.get() + (size_t)layer * n_ctx_ * v.v_row * v.elem_bytes : nullptr);
    return v;
  }

  void clear(int seq) override {
    if (seq >= 0 && seq < (int)seqs_.size()) {
      seqs_[seq] = Seq{};
      if (recurrent_) recurrent_->clear(seq);
    }
  }

  uint64_t bytes_allocated() const override {
    uint64_t n = 0;
    for (const Seq& s : seqs_) n += s.k_bytes + s.v_bytes;
    if (recurrent_) n += recurrent_->bytes_allocated();
    return n;
  }

 private:
  struct Seq {
    HugeArray<uint8_t> k, v;
    size_t k_bytes = 0, v_bytes = 0;
  };
  KvShape shape_;
  int n_ctx_;
  std::vector<Seq> seqs_;
};

}  // namespace

std::unique_ptr<KvCache> make_simple_kv_cache(const KvShape& shape, int n_ctx, int max_seqs) {
  return std::make_unique<SimpleKvCache>(shape, n_ctx, max_seqs);
}

}  // namespace spool
