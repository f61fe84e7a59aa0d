// Compiled grammars cached per vocabulary: the server and the CLI ask for a
// grammar by its source (GBNF text, JSON Schema, regex, "any JSON object")
// and get the shared TokenMasker, so requests with the same schema share
// the matcher's states, transitions and masks. Least recently used entries
// beyond the capacity are dropped (requests holding them keep them alive).
#pragma once

#include <list>
#include <memory>
#include <mutex>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <unordered_map>

#include "grammar/token_mask.h"

namespace spool::grammar {

class GrammarCache {
 public:
  explicit GrammarCache(const Tokenizer& tok, size_t capacity = 64) : tok_(tok), capacity_(capacity) {}

  // Each throws GrammarError naming the problem.
  std::shared_ptr<TokenMasker> gbnf(const std::string& text);
  // compact: no whitespace between JSON tokens (json_schema.h).
  std::shared_ptr<TokenMasker> json_schema(const nlohmann::ordered_json& schema, bool compact = false);
  std::shared_ptr<TokenMasker> json_object(bool compact = false);
  std::shared_ptr<TokenMasker> regex(const std::string& pattern);

  size_t size();
  uint64_t hits() const { return hits_; }

 private:
  template <class Build>
  std::shared_ptr<TokenMasker> get(const std::string& key, Build build);
  std::shared_ptr<const VocabIndex> vocab();

  const Tokenizer& tok_;
  size_t capacity_;
  std::mutex mu_;
  std::shared_ptr<const VocabIndex> vocab_;
  std::list<std::pair<std::string, std::shared_ptr<TokenMasker>>> lru_;  // most recent first
  std::unordered_map<std::string, decltype(lru_)::iterator> index_;
  uint64_t hits_ = 0;
};

}  // namespace spool::grammar
