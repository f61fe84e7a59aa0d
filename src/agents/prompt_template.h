// Agent prompt templates. Placeholders: {task}, {input}, {previous},
// {round} and {agents.NAME.output}; "{{" and "}}" are literal braces. Any
// other "{word}" or "{a.b.c}" is an error (a typo must not pass silently);
// braces around anything else (JSON in a prompt) are literal text.
#pragma once

#include <functional>
#include <string>
#include <vector>

namespace spool::agents {

struct Placeholder {
  enum class Kind { Task, Input, Previous, Round, AgentOutput };
  Kind kind;
  std::string agent;  // AgentOutput
};

// One piece of a rendered prompt; history pieces ({previous} and
// {agents.NAME.output}) are what a context policy may shorten.
struct PromptPiece {
  std::string text;
  bool history = false;
};

struct TemplateVars {
  std::string task, input, previous;
  int round = 1;
  std::function<std::string(const std::string& agent)> agent_output;
};

// The placeholders a template uses, in order. Throws std::invalid_argument
// naming the bad placeholder.
std::vector<Placeholder> template_placeholders(const std::string& tmpl);

std::vector<PromptPiece> render_template(const std::string& tmpl, const TemplateVars& vars);
std::string join_pieces(const std::vector<PromptPiece>& pieces);

}  // namespace spool::agents
