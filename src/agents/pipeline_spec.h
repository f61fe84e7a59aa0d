// Pipeline specs: agents (model, system prompt, prompt template, sampling,
// retries, timeout) and the stages they run in (one agent, a parallel
// fan-out, or a group repeated in rounds until a stop marker or max_rounds).
//
// Three input shapes parse into one PipelineSpec (docs/AGENTS.md):
//  - the native shape: {"agents": [{...}], "stages": [...]} ("stages" omitted:
//    the agents run one after another);
//  - the chain shape users write: {"task", "agents": [{"name", "prompt",
//    "temperature"}], "max_rounds": N}: a sequential chain repeated up to N
//    times, each agent seeing the task and the previous agent's output;
//  - the config shape: {"model", "max_context", "max_tokens", "temperature",
//    "agents": ["planner", "executor", ...], "enable_batch"}: agent names with
//    built-in roles (planner, executor, summarizer, critic).
// Everything is validated before a run is stored: an unknown model alias, a
// template naming an unknown or later agent, an agent in two stages, a
// missing or mistyped field, an out-of-range number is a SpecError naming the
// field (e.g. "agents[1].prompt").
#pragma once

#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <vector>

#include "agents/prompt_template.h"

namespace spool::agents {

// Specs keep their keys in the order written (an output_schema's members are
// generated in that order), from the request body through the store.
using SpecJson = nlohmann::ordered_json;

struct SpecError : std::runtime_error {
  SpecError(std::string field, const std::string& message)
      : std::runtime_error(field + ": " + message), field(std::move(field)) {}
  std::string field;  // JSON path of the offending field
};

// What an agent's input does when it would not fit max_context.
enum class ContextPolicy { Summarize, Truncate, Fail };
const char* context_policy_name(ContextPolicy p);

struct AgentSpec {
  std::string name;
  std::string model;            // alias; resolved to the spec's default when not given
  std::string role;             // built-in role (planner, executor, summarizer, critic) or ""
  std::string system;           // system prompt ("" none)
  std::string prompt;           // template: {task} {input} {previous} {agents.NAME.output[.path]} {round} {item[.path]}
  nlohmann::ordered_json output_schema;  // JSON Schema the output is constrained to (null: free text)
  bool compact_json = false;    // with output_schema: no whitespace between JSON tokens
  float temperature = 0.7f;
  float top_p = 1.0f;
  int max_tokens = 256;
  std::vector<std::string> stop;
  int retries = 0;              // 0..2 further attempts after a failure
  double timeout_s = 0;         // per attempt; 0: none
  uint64_t seed = 0;            // 0: random
};

struct Stage {
  enum class Kind { Agent, Parallel, Rounds, ForEach };
  Kind kind = Kind::Agent;
  std::vector<std::string> agents;  // Agent, ForEach: one name; Parallel: several
  std::vector<Stage> body;          // Rounds: Agent, Parallel and ForEach stages
  std::string until;                // Rounds: stop once an output of the round contains this ("" never)
  int max_rounds = 1;               // Rounds: at most this many
  Placeholder source;               // ForEach: the array (an earlier agent's structured output, with a path)
  int max_items = 16;               // ForEach: more elements than this fail the step
};

struct PipelineSpec {
  std::string name;
  std::string task;                 // the spec's own task ("" : the run's input is the task)
  std::string model;                // default model alias
  int max_context = 0;              // tokens per agent prompt + reply; 0: the model's context
  ContextPolicy context_policy = ContextPolicy::Summarize;
  bool enable_batch = true;         // false: a parallel stage runs its agents one at a time
  std::vector<AgentSpec> agents;
  std::vector<Stage> stages;        // always filled after parsing
  const AgentSpec* agent(const std::string& name) const;
};

// The models a spec may name. The first alias is the default model.
struct SpecContext {
  std::vector<std::string> model_aliases;
};

// Parses and validates any of the three shapes. Throws SpecError.
PipelineSpec parse_pipeline_spec(const SpecJson& j, const SpecContext& ctx);

// The agents of a stage in execution order, flattened (Rounds: its body's).
std::vector<std::string> stage_agents(const Stage& s);

// The name a for_each stage gives the step of element i: "executor[2]".
std::string item_step_name(const std::string& agent, size_t i);
// The agent a step name belongs to ("executor[2]" -> "executor").
std::string step_agent(const std::string& step_name);

// Built-in role system prompts (planner, executor, summarizer, critic); "" for others.
std::string role_system_prompt(const std::string& role);

}  // namespace spool::agents
