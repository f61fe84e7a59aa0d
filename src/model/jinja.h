// A Jinja-subset template engine, enough for the chat templates that ship with
// Hugging Face models and GGUF files (tokenizer.chat_template). Parse once with
// Template, render many times with a context of variables. Errors (syntax,
// unknown filter, raise_exception) throw spool::Error naming the line/column.
#pragma once

#include <memory>
#include <string>

#include "model/jinja_ast.h"
#include "model/jinja_value.h"

namespace spool::jinja {

struct TemplateOptions {
  bool trim_blocks = false;    // drop the first newline after a block tag
  bool lstrip_blocks = false;  // drop spaces/tabs before a block tag at a line start
};

class Template {
 public:
  explicit Template(const std::string& source, TemplateOptions options = {});
  // `context` holds the template's variables (a dict; other kinds are ignored).
  std::string render(const Value& context) const;

 private:
  std::shared_ptr<const Body> body_;
};

}  // namespace spool::jinja
