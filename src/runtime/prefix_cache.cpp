// PrefixCache: chained block hashes (FNV-1a style mixing over the parent key
// and the token ids), verified against the stored tokens on lookup.
#include "runtime/prefix_cache.h"

#include <algorithm>

#include "core/error.h"

namespace spool {

PrefixCache::PrefixCache(PagedKvCache& kv) : kv_(kv), key_of_block_(kv.n_blocks(), 0) {
  kv_.on_evict = [this](int block) {
    const uint64_t key = key_of_block_[block];
    if (by_key_.erase(key) && on_forget) on_forget(key);
    key_of_block_[block] = 0;
  };
}

PrefixCache::~PrefixCache() { kv_.on_evict = nullptr; }

uint64_t PrefixCache::block_key(uint64_t parent, const int32_t* tokens, int n) {
  uint64_t h = parent ^ 0xcbf29ce484222325ull;
  for (int i = 0; i < n; ++i) {
    h ^= (uint32_t)tokens[i];
    h *= 0x100000001b3ull;
    h ^= h >> 29;
  }
  h ^= (uint64_t)n * 0x9E3779B97F4A7C15ull;
  return h == 0 ? 1 : h;  // 0 marks "no key"
}

std::vector<uint64_t> PrefixCache::keys_of(const std::vector<int32_t>& tokens) const {
  const int bs = kv_.block_size();
  std::vector<uint64_t> keys;
  uint64_t parent = kRoot;
  for (size_t i = 0; (i + 1) * bs <= tokens.size(); ++i) {
    parent = block_key(parent, tokens.data() + i * bs, bs);
    keys.push_back(parent);
  }
  return keys;
}

std::vector<int> PrefixCache::match(const std::vector<int32_t>& tokens, int max_blocks) const {
  const int bs = kv_.block_size();
  std::vector<int> blocks;
  uint64_t parent = kRoot;
  for (size_t i = 0; (int)i < max_blocks && (i + 1) * bs <= tokens.size(); ++i) {
    const uint64_t key = block_key(parent, tokens.data() + i * bs, bs);
    auto it = by_key_.find(key);
    if (it == by_key_.end() || it->second.parent != parent ||
        !std::equal(it->second.tokens.begin(), it->second.tokens.end(), tokens.begin() + i * bs))
      break;
    blocks.push_back(it->second.block);
    parent = key;
  }
  return blocks;
}

uint64_t PrefixCache::insert(uint64_t parent, const int32_t* block_tokens, int block) {
  const int bs = kv_.block_size();
  const uint64_t key = block_key(parent, block_tokens, bs);
  if (kv_.is_cached(block) || by_key_.count(key)) return key;
  by_key_[key] = Entry{block, parent, std::vector<int32_t>(block_tokens, block_tokens + bs)};
  key_of_block_[block] = key;
  kv_.set_cached(block, true);
  if (on_insert) on_insert(key, parent, block_tokens, block);
  return key;
}

}  // namespace spool
