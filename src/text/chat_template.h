// Chat templates: a model's Jinja template (GGUF tokenizer.chat_template, or
// Hugging Face tokenizer_config.json "chat_template" / chat_template.jinja, which
// the HF loader copies into the same key) rendered over a conversation into the
// prompt text, as transformers' apply_chat_template does (trim_blocks, lstrip_blocks).
#pragma once

#include <string>
#include <vector>

#include "text/jinja.h"
#include "text/tokenizer.h"

namespace spool {
namespace gguf { struct File; }

struct ChatMessage {
  std::string role, content;
};

class ChatTemplate {
 public:
  // Parses `source`; throws spool::Error naming the line/column of a syntax error.
  explicit ChatTemplate(const std::string& source);
  const std::string& source() const { return source_; }

  // `extra` (a dict, may be undefined) adds or overrides template variables, e.g. tools.
  std::string render(const std::vector<ChatMessage>& messages, bool add_generation_prompt,
                     const std::string& bos_token, const std::string& eos_token,
                     const jinja::Value& extra = jinja::Value()) const;
  // The same with messages already as template values (a list of dicts), for
  // messages with fields beyond role and content (tool calls, ...).
  std::string render(const jinja::Value& messages, bool add_generation_prompt, const std::string& bos_token,
                     const std::string& eos_token, const jinja::Value& extra = jinja::Value()) const;

 private:
  std::string source_;
  jinja::Template template_;
};

// The chat template in a model's metadata, or "" if it has none.
std::string chat_template_source(const gguf::File& file);

// The chat prompt as `spool run --chat` builds it: the template rendered with
// add_generation_prompt, BOS added when the tokenizer wants it and the template
// did not write it.
std::vector<int32_t> chat_prompt_tokens(const std::vector<ChatMessage>& messages, const Tokenizer& tok,
                                        const ChatTemplate& tmpl);
// The same over messages as template values (tool calls, tool results) with
// extra variables (e.g. `tools`).
std::vector<int32_t> chat_prompt_tokens(const jinja::Value& messages, const Tokenizer& tok, const ChatTemplate& tmpl,
                                        const jinja::Value& extra);

}  // namespace spool
