// A Jinja-subset template engine, enough for the chat templates that ship with
// Hugging Face models and GGUF files (tokenizer.chat_template). Parse once with
// Template, render many times with a context of variables. Errors (syntax,
// unknown filter, raise_exception) throw spool::Error naming the line/column.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "text/jinja_ast.h"
#include "text/jinja_value.h"

namespace spool::jinja {

// A template comes from a model file or a client, so a render is bounded: past
// any of these limits it stops with a spool::Error naming the limit and the
// place, instead of looping forever, recursing off the stack or filling memory.
struct TemplateOptions {
  bool trim_blocks = false;    // drop the first newline after a block tag
  bool lstrip_blocks = false;  // drop spaces/tabs before a block tag at a line start
  uint64_t max_steps = 10'000'000;       // statements, expressions and loop iterations evaluated
  uint64_t max_output_bytes = 256u << 20;  // bytes of strings and lists built, summed over the render
  int max_depth = 400;                   // nesting of statements, expressions and macro calls while rendering
};

class Template {
 public:
  explicit Template(const std::string& source, TemplateOptions options = {});
  // `context` holds the template's variables (a dict; other kinds are ignored).
  std::string render(const Value& context) const;

 private:
  std::shared_ptr<const Body> body_;
  TemplateOptions options_;
};

}  // namespace spool::jinja
