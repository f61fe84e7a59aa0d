// RecurrentState: one zeroed block of floats per live sequence.
#include "model/recurrent_state.h"

#include <cstring>
#include <string>

#include "core/error.h"

namespace spool {

bool RecurrentShape::empty() const {
  for (int64_t n : conv_floats)
    if (n > 0) return false;
  for (int64_t n : ssm_floats)
    if (n > 0) return false;
  return true;
}

uint64_t RecurrentShape::bytes_per_seq() const {
  uint64_t n = 0;
  for (int64_t f : conv_floats) n += (uint64_t)f;
  for (int64_t f : ssm_floats) n += (uint64_t)f;
  return n * sizeof(float);
}

RecurrentState::RecurrentState(const RecurrentShape& shape, int max_seqs) : shape_(shape), seqs_(max_seqs) {
  if (shape.conv_floats.size() != shape.ssm_floats.size())
    throw Error("recurrent state: conv and delta-rule layer counts differ");
  for (size_t l = 0; l < shape.conv_floats.size(); ++l) {
    if (shape.conv_floats[l] < 0 || shape.ssm_floats[l] < 0) throw Error("recurrent state: negative size");
    conv_off_.push_back(floats_per_seq_);
    floats_per_seq_ += (uint64_t)shape.conv_floats[l];
    ssm_off_.push_back(floats_per_seq_);
    floats_per_seq_ += (uint64_t)shape.ssm_floats[l];
  }
}

RecurrentState::Seq& RecurrentState::seq_at(int seq) {
  if (seq < 0 || seq >= (int)seqs_.size())
    throw Error("recurrent state: sequence id " + std::to_string(seq) + " out of range (max " +
                std::to_string(seqs_.size()) + ")");
  return seqs_[seq];
}
const RecurrentState::Seq& RecurrentState::seq_at(int seq) const {
  return const_cast<RecurrentState*>(this)->seq_at(seq);
}

void RecurrentState::ensure(int seq) {
  Seq& s = seq_at(seq);
  if (s.data || floats_per_seq_ == 0) return;
  s.data = make_huge_array<float>(floats_per_seq_);
  std::memset(s.data.get(), 0, floats_per_seq_ * sizeof(float));
  s.n_tokens = 0;
}

bool RecurrentState::has(int seq) const { return seq >= 0 && seq < (int)seqs_.size() && seqs_[seq].data; }

void RecurrentState::clear(int seq) {
  Seq& s = seq_at(seq);
  s = Seq{};
}

float* RecurrentState::conv(int layer, int seq) {
  Seq& s = seq_at(seq);
  SPOOL_CHECK(s.data != nullptr);
  return s.data.get() + conv_off_.at(layer);
}

float* RecurrentState::ssm(int layer, int seq) {
  Seq& s = seq_at(seq);
  SPOOL_CHECK(s.data != nullptr);
  return s.data.get() + ssm_off_.at(layer);
}

int RecurrentState::n_tokens(int seq) const { return seq_at(seq).n_tokens; }
void RecurrentState::set_n_tokens(int seq, int n) { seq_at(seq).n_tokens = n; }

void RecurrentState::copy(int dst, int src) {
  if (dst == src) return;
  ensure(src);
  ensure(dst);
  std::memcpy(seq_at(dst).data.get(), seq_at(src).data.get(), floats_per_seq_ * sizeof(float));
  seq_at(dst).n_tokens = seq_at(src).n_tokens;
}

int RecurrentState::save(int seq, std::vector<float>& out) const {
  const Seq& s = seq_at(seq);
  SPOOL_CHECK(s.data != nullptr);
  out.assign(s.data.get(), s.data.get() + floats_per_seq_);
  return s.n_tokens;
}

void RecurrentState::restore(int seq, const std::vector<float>& in, int n_tokens) {
  SPOOL_CHECK(in.size() == floats_per_seq_);
  ensure(seq);
  std::memcpy(seq_at(seq).data.get(), in.data(), floats_per_seq_ * sizeof(float));
  seq_at(seq).n_tokens = n_tokens;
}

uint64_t RecurrentState::bytes_allocated() const { return (uint64_t)n_active() * floats_per_seq_ * sizeof(float); }

int RecurrentState::n_active() const {
  int n = 0;
  for (const Seq& s : seqs_) n += s.data ? 1 : 0;
  return n;
}

}  // namespace spool
