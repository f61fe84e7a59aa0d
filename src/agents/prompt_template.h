// Agent prompt templates. Placeholders: {task}, {input}, {previous},
// {round}, {agents.NAME.output} with an optional path into a structured
// output ({agents.planner.output.steps[0].title}), and {item} (with a path)
// in an agent of a for_each stage; "{{" and "}}" are literal braces. Any
// other "{word}" or "{a.b.c}" is an error (a typo must not pass silently);
// braces around anything else (JSON in a prompt) are literal text.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace spool::agents {

// One step of a path into a JSON value: a member name or an array index.
struct PathStep {
  std::string key;
  int64_t index = -1;  // >= 0: an array element ([N])
};
std::string path_text(const std::vector<PathStep>& path);  // ".steps[0].title"

struct Placeholder {
  enum class Kind { Task, Input, Previous, Round, AgentOutput, Item };
  Kind kind = Kind::Task;
  std::string agent;           // AgentOutput
  std::vector<PathStep> path;  // AgentOutput, Item: into the structured value (empty: the whole output / element)
  std::string text;            // as written, without the braces (for messages)
};

// One piece of a rendered prompt; history pieces ({previous},
// {agents.NAME.output...} and {item...}) are what a context policy may shorten.
struct PromptPiece {
  std::string text;
  bool history = false;
};

struct TemplateVars {
  std::string task, input, previous;
  int round = 1;
  // The text of an AgentOutput or Item placeholder; may throw (a missing path).
  std::function<std::string(const Placeholder& p)> value;
};

// The placeholders a template uses, in order. Throws std::invalid_argument
// naming the bad placeholder.
std::vector<Placeholder> template_placeholders(const std::string& tmpl);

// "agents.planner.output.steps" or "{agents.planner.output.steps}" as a
// placeholder (a for_each source). Throws std::invalid_argument.
Placeholder parse_placeholder(const std::string& text);

std::vector<PromptPiece> render_template(const std::string& tmpl, const TemplateVars& vars);
std::string join_pieces(const std::vector<PromptPiece>& pieces);

}  // namespace spool::agents
