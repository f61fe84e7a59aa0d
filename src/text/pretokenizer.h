// Pre-tokenizers for byte-level BPE vocabularies: the text is cut into words by
// a sequence of split regexes chosen by the GGUF key tokenizer.ggml.pre (each
// regex cuts every piece left by the previous one into matches and the gaps
// between them). BPE merges then never cross a word boundary.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "text/unicode_regex.h"

namespace spool {

class PreTokenizer {
 public:
  // `name` is the value of tokenizer.ggml.pre ("" means "default", as for old
  // GGUFs such as gpt-neox). Throws spool::Error for names it does not know.
  explicit PreTokenizer(const std::string& name);

  // Splits UTF-8 text into words (UTF-8, invalid bytes replaced by U+FFFD).
  std::vector<std::string> split(std::string_view text) const;

  const std::string& name() const { return name_; }
  static std::vector<std::string> known_names();
  // The name whose split regexes are exactly `patterns` (as a tokenizer.json
  // Sequence of Split pre-tokenizers lists them); "" if none is known.
  static std::string name_for_patterns(const std::vector<std::string>& patterns);

 private:
  std::string name_;
  std::vector<UnicodeRegex> regexes_;
};

}  // namespace spool
