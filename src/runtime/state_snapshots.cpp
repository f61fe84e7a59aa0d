// StateSnapshots: a key -> full recurrent state map with an LRU list.
#include "runtime/state_snapshots.h"

#include <algorithm>
#include <cstring>

#include "core/error.h"

namespace spool {

uint64_t state_floats(const RecurrentShape& shape) { return shape.bytes_per_seq() / sizeof(float); }

namespace {

// Every layer's conv then delta-rule part of seq's state, to (save) or from a flat buffer.
void copy_state(RecurrentState& rs, int seq, float* flat, bool save) {
  const RecurrentShape& sh = rs.shape();
  for (size_t l = 0; l < sh.conv_floats.size(); ++l) {
    const std::pair<int64_t, float*> parts[2] = {{sh.conv_floats[l], sh.conv_floats[l] ? rs.conv((int)l, seq) : nullptr},
                                                 {sh.ssm_floats[l], sh.ssm_floats[l] ? rs.ssm((int)l, seq) : nullptr}};
    for (const auto& [n, p] : parts) {
      if (n == 0) continue;
      if (save) std::memcpy(flat, p, (size_t)n * sizeof(float));
      else std::memcpy(p, flat, (size_t)n * sizeof(float));
      flat += n;
    }
  }
}

}  // namespace

StateSnapshots::StateSnapshots(int max_slots, int interval, uint64_t floats_per_state)
    : max_slots_(max_slots), interval_(interval), floats_(floats_per_state) {
  if (max_slots < 1) throw Error("state snapshots: at least one slot");
  if (interval < 1) throw Error("state snapshots: the interval must be positive");
}

const StateSnapshots::Snapshot* StateSnapshots::find(uint64_t key, uint64_t parent, const int32_t* block_tokens,
                                                     int n) const {
  auto it = by_key_.find(key);
  if (it == by_key_.end()) return nullptr;
  const Snapshot& s = it->second;
  if (s.parent != parent || (int)s.block_tokens.size() != n ||
      !std::equal(s.block_tokens.begin(), s.block_tokens.end(), block_tokens))
    return nullptr;
  return &s;
}

bool StateSnapshots::has(uint64_t key, uint64_t parent, const int32_t* block_tokens, int n) const {
  return find(key, parent, block_tokens, n) != nullptr;
}

void StateSnapshots::save(uint64_t key, uint64_t parent, const int32_t* block_tokens, int n, int pos,
                          const RecurrentState& rs, int seq) {
  SPOOL_CHECK(state_floats(rs.shape()) == floats_);
  SPOOL_CHECK(rs.n_tokens(seq) == pos);
  if (auto it = by_key_.find(key); it != by_key_.end()) {
    lru_.splice(lru_.end(), lru_, it->second.lru_pos);  // same prefix, same state: keep it, mark it used
    return;
  }
  copy_state(const_cast<RecurrentState&>(rs), seq, insert(key, parent, block_tokens, n, pos).data(), true);
  ++stats_.taken;
}

std::span<float> StateSnapshots::insert(uint64_t key, uint64_t parent, const int32_t* block_tokens, int n, int pos) {
  if (by_key_.count(key)) drop(key);
  HugeArray<float> data;
  if ((int)by_key_.size() >= max_slots_) {  // reuse the oldest snapshot's memory
    auto old = by_key_.find(lru_.front());
    data = std::move(old->second.data);
    by_key_.erase(old);
    lru_.pop_front();
    ++stats_.evicted;
  } else {
    data = make_huge_array<float>(std::max<uint64_t>(floats_, 1));
  }
  Snapshot& s = by_key_[key];
  s.parent = parent;
  s.block_tokens.assign(block_tokens, block_tokens + n);
  s.pos = pos;
  s.data = std::move(data);
  s.lru_pos = lru_.insert(lru_.end(), key);
  return {s.data.get(), (size_t)floats_};
}

std::span<const float> StateSnapshots::data(uint64_t key) const {
  auto it = by_key_.find(key);
  if (it == by_key_.end()) return {};
  return {it->second.data.get(), (size_t)floats_};
}

int StateSnapshots::restore(uint64_t key, uint64_t parent, const int32_t* block_tokens, int n, RecurrentState& rs,
                            int seq) {
  const Snapshot* s = find(key, parent, block_tokens, n);
  if (!s) return -1;
  rs.ensure(seq);
  copy_state(rs, seq, s->data.get(), false);
  rs.set_n_tokens(seq, s->pos);
  lru_.splice(lru_.end(), lru_, s->lru_pos);
  return s->pos;
}

void StateSnapshots::drop(uint64_t key) {
  auto it = by_key_.find(key);
  if (it == by_key_.end()) return;
  lru_.erase(it->second.lru_pos);
  by_key_.erase(it);
  ++stats_.evicted;
}

StateSnapshotStats StateSnapshots::stats() const {
  StateSnapshotStats s = stats_;
  s.count = (int)by_key_.size();
  s.bytes = (uint64_t)s.count * floats_ * sizeof(float);
  return s;
}

}  // namespace spool
