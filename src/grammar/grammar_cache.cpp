// GrammarCache: key = kind + source text; compile outside the lock.
#include "grammar/grammar_cache.h"

#include <nlohmann/json.hpp>

#include "grammar/json_schema.h"
#include "grammar/regex.h"

namespace spool::grammar {

std::shared_ptr<const VocabIndex> GrammarCache::vocab() {
  std::lock_guard<std::mutex> lock(mu_);
  if (!vocab_) vocab_ = VocabIndex::build(tok_);
  return vocab_;
}

template <class Build>
std::shared_ptr<TokenMasker> GrammarCache::get(const std::string& key, Build build) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (auto it = index_.find(key); it != index_.end()) {
      lru_.splice(lru_.begin(), lru_, it->second);
      ++hits_;
      return it->second->second;
    }
  }
  auto compiled = std::make_shared<CompiledGrammar>(parse_gbnf(build()));
  auto masker = std::make_shared<TokenMasker>(std::move(compiled), vocab());
  std::lock_guard<std::mutex> lock(mu_);
  if (auto it = index_.find(key); it != index_.end()) return it->second->second;  // compiled twice; keep one
  lru_.emplace_front(key, masker);
  index_[key] = lru_.begin();
  while (lru_.size() > capacity_) {
    index_.erase(lru_.back().first);
    lru_.pop_back();
  }
  return masker;
}

std::shared_ptr<TokenMasker> GrammarCache::gbnf(const std::string& text) {
  return get("gbnf\n" + text, [&] { return text; });
}

std::shared_ptr<TokenMasker> GrammarCache::json_schema(const nlohmann::ordered_json& schema, bool compact) {
  JsonGbnfOptions o;
  o.compact = compact;
  return get(std::string(compact ? "compact-" : "") + "schema\n" + schema.dump(), [&] { return json_schema_to_gbnf(schema, o); });
}

std::shared_ptr<TokenMasker> GrammarCache::json_object(bool compact) {
  return get(compact ? "compact-json_object" : "json_object", [&] { return json_object_gbnf(compact); });
}

std::shared_ptr<TokenMasker> GrammarCache::regex(const std::string& pattern) {
  return get("regex\n" + pattern, [&] { return regex_to_gbnf(pattern); });
}

size_t GrammarCache::size() {
  std::lock_guard<std::mutex> lock(mu_);
  return lru_.size();
}

}  // namespace spool::grammar
