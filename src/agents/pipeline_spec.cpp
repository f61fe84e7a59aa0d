#include "agents/pipeline_spec.h"

#include <algorithm>
#include <map>
#include <set>

#include "agents/agent_output.h"
#include "agents/prompt_template.h"
#include "grammar/grammar.h"
#include "grammar/json_schema.h"

namespace spool::agents {

using json = SpecJson;

namespace {

const char* type_name(const json& j) {
  switch (j.type()) {
    case json::value_t::null: return "null";
    case json::value_t::boolean: return "a boolean";
    case json::value_t::string: return "a string";
    case json::value_t::array: return "an array";
    case json::value_t::object: return "an object";
    default: return "a number";
  }
}

[[noreturn]] void mistyped(const std::string& field, const char* want, const json& got) {
  throw SpecError(field, std::string("must be ") + want + ", got " + type_name(got));
}

// Typed optional fields of one JSON object; `where` is its path ("" top level).
class Fields {
 public:
  Fields(const json& obj, std::string where) : obj_(obj), where_(std::move(where)) {}
  std::string path(const std::string& key) const { return where_.empty() ? key : where_ + "." + key; }
  const json* find(const std::string& key) const {
    const auto it = obj_.find(key);
    return it == obj_.end() || it->is_null() ? nullptr : &*it;
  }
  bool has(const std::string& key) const { return find(key) != nullptr; }
  std::string str(const std::string& key, const std::string& def, bool required = false) const {
    const json* v = find(key);
    if (!v) {
      if (required) throw SpecError(path(key), "is required");
      return def;
    }
    if (!v->is_string()) mistyped(path(key), "a string", *v);
    return v->get<std::string>();
  }
  double num(const std::string& key, double def, double lo, double hi) const {
    const json* v = find(key);
    if (!v) return def;
    if (!v->is_number()) mistyped(path(key), "a number", *v);
    const double x = v->get<double>();
    if (!(x >= lo && x <= hi))
      throw SpecError(path(key), "must be between " + fmt(lo) + " and " + fmt(hi) + ", got " + v->dump());
    return x;
  }
  int integer(const std::string& key, int def, int lo, int hi) const {
    const json* v = find(key);
    if (!v) return def;
    if (!v->is_number_integer()) mistyped(path(key), "an integer", *v);
    const int64_t x = v->get<int64_t>();
    if (x < lo || x > hi)
      throw SpecError(path(key), "must be between " + std::to_string(lo) + " and " + std::to_string(hi) + ", got " +
                                     std::to_string(x));
    return (int)x;
  }
  bool boolean(const std::string& key, bool def) const {
    const json* v = find(key);
    if (!v) return def;
    if (!v->is_boolean()) mistyped(path(key), "a boolean", *v);
    return v->get<bool>();
  }
  std::vector<std::string> strings(const std::string& key) const {
    const json* v = find(key);
    if (!v) return {};
    if (v->is_string()) return {v->get<std::string>()};
    if (!v->is_array()) mistyped(path(key), "a string or an array of strings", *v);
    std::vector<std::string> out;
    for (size_t i = 0; i < v->size(); ++i) {
      if (!(*v)[i].is_string()) mistyped(path(key) + "[" + std::to_string(i) + "]", "a string", (*v)[i]);
      out.push_back((*v)[i].get<std::string>());
    }
    return out;
  }
  void only(std::initializer_list<const char*> allowed) const {
    for (auto it = obj_.begin(); it != obj_.end(); ++it) {
      if (std::none_of(allowed.begin(), allowed.end(), [&](const char* a) { return it.key() == a; }))
        throw SpecError(path(it.key()), "unknown field");
    }
  }

 private:
  static std::string fmt(double x) {
    std::string s = std::to_string(x);
    s.erase(s.find_last_not_of('0') + 1);
    if (!s.empty() && s.back() == '.') s.pop_back();
    return s;
  }
  const json& obj_;
  std::string where_;
};

const char* kRoles[] = {"planner", "executor", "summarizer", "critic"};

// "executor", "executor2", "executor_b" -> "executor"; "" when no role matches.
std::string role_of(const std::string& name) {
  for (const char* r : kRoles) {
    const std::string role = r;
    if (name.compare(0, role.size(), role) == 0 &&
        (name.size() == role.size() || !std::isalpha((unsigned char)name[role.size()])))
      return role;
  }
  return "";
}

void check_agent_name(const std::string& name, const std::string& field) {
  if (name.empty()) throw SpecError(field, "must not be empty");
  if (name.size() > 64) throw SpecError(field, "is longer than 64 characters");
  for (char c : name)
    if (!(std::isalnum((unsigned char)c) || c == '_' || c == '-'))
      throw SpecError(field, "'" + name + "' may only contain letters, digits, '_' and '-'");
}

struct Defaults {
  float temperature = 0.7f, top_p = 1.0f;
  int max_tokens = 256, retries = 0;
  double timeout_s = 0;
};

AgentSpec parse_agent(const json& j, const std::string& where, const Defaults& d) {
  if (!j.is_object()) mistyped(where, "an object", j);
  Fields f(j, where);
  f.only({"name", "model", "role", "system", "prompt", "temperature", "top_p", "max_tokens", "stop", "retries",
          "timeout", "seed", "output_schema", "compact_json"});
  AgentSpec a;
  a.name = f.str("name", "", true);
  check_agent_name(a.name, f.path("name"));
  a.role = f.str("role", role_of(a.name));
  if (!a.role.empty() && role_system_prompt(a.role).empty())
    throw SpecError(f.path("role"), "unknown role '" + a.role + "' (planner, executor, summarizer, critic)");
  a.model = f.str("model", "");
  a.system = f.str("system", role_system_prompt(a.role));
  a.prompt = f.str("prompt", "", a.role.empty());
  a.temperature = (float)f.num("temperature", d.temperature, 0, 2);
  a.top_p = (float)f.num("top_p", d.top_p, 0, 1);
  if (a.top_p <= 0) throw SpecError(f.path("top_p"), "must be greater than 0");
  a.max_tokens = f.integer("max_tokens", d.max_tokens, 1, 1 << 20);
  a.stop = f.strings("stop");
  if (a.stop.size() > 8) throw SpecError(f.path("stop"), "at most 8 stop strings");
  for (size_t i = 0; i < a.stop.size(); ++i)
    if (a.stop[i].empty()) throw SpecError(f.path("stop") + "[" + std::to_string(i) + "]", "must not be empty");
  a.retries = f.integer("retries", d.retries, 0, 2);
  a.timeout_s = f.num("timeout", d.timeout_s, 0, 86400);
  const json* seed = f.find("seed");
  if (seed) {
    if (!seed->is_number_unsigned() && !(seed->is_number_integer() && seed->get<int64_t>() >= 0))
      mistyped(f.path("seed"), "a non-negative integer", *seed);
    a.seed = seed->get<uint64_t>();
  }
  a.compact_json = f.boolean("compact_json", false);
  if (const json* schema = f.find("output_schema")) {
    if (!schema->is_object()) mistyped(f.path("output_schema"), "an object (a JSON Schema)", *schema);
    a.output_schema = nlohmann::ordered_json(*schema);
    try {  // the grammar the output is constrained by; its compilation names what is wrong
      grammar::parse_gbnf(grammar::json_schema_to_gbnf(a.output_schema));
    } catch (const grammar::GrammarError& e) {
      throw SpecError(f.path("output_schema"), e.what());
    }
  }
  return a;
}

Stage parse_stage(const json& j, const std::string& where, bool in_rounds) {
  Stage s;
  if (j.is_string()) {
    s.agents = {j.get<std::string>()};
    return s;
  }
  if (!j.is_object()) mistyped(where, "an agent name or an object", j);
  Fields f(j, where);
  if (f.has("for_each")) {
    f.only({"for_each", "agent", "max_items"});
    s.kind = Stage::Kind::ForEach;
    s.agents = {f.str("agent", "", true)};
    const std::string src = f.str("for_each", "");
    try {
      s.source = parse_placeholder(src);
    } catch (const std::invalid_argument& e) {
      throw SpecError(f.path("for_each"), e.what());
    }
    if (s.source.kind != Placeholder::Kind::AgentOutput)
      throw SpecError(f.path("for_each"), "must name an earlier agent's structured output, like "
                                          "\"agents.planner.output.steps\", got '" + src + "'");
    s.max_items = f.integer("max_items", 16, 1, 256);
    return s;
  }
  const int kinds = f.has("agent") + f.has("parallel") + f.has("rounds");
  if (kinds != 1) throw SpecError(where, "a stage has exactly one of 'agent', 'parallel', 'rounds' or 'for_each'");
  if (f.has("agent")) {
    f.only({"agent"});
    s.agents = {f.str("agent", "")};
  } else if (f.has("parallel")) {
    f.only({"parallel"});
    s.kind = Stage::Kind::Parallel;
    const json& p = *f.find("parallel");
    if (!p.is_array() || p.empty()) mistyped(f.path("parallel"), "a non-empty array of agent names", p);
    s.agents = f.strings("parallel");
  } else {
    f.only({"rounds", "until", "max_rounds"});
    if (in_rounds) throw SpecError(f.path("rounds"), "rounds cannot be nested");
    s.kind = Stage::Kind::Rounds;
    const json& r = *f.find("rounds");
    if (!r.is_array() || r.empty()) mistyped(f.path("rounds"), "a non-empty array of stages", r);
    for (size_t i = 0; i < r.size(); ++i)
      s.body.push_back(parse_stage(r[i], f.path("rounds") + "[" + std::to_string(i) + "]", true));
    s.until = f.str("until", "");
    s.max_rounds = f.integer("max_rounds", 1, 1, 100);
  }
  return s;
}

// Flattened order: every agent's position (parallel siblings share one), and
// the path of the stage that names it (for errors).
struct Order {
  std::map<std::string, int> pos;
  std::map<std::string, std::pair<const Stage*, std::string>> for_each;  // agent -> its for_each stage and path
  int next = 0;
  void add(const Stage& s, const std::string& where, const PipelineSpec& spec) {
    if (s.kind == Stage::Kind::Rounds) {
      for (size_t i = 0; i < s.body.size(); ++i) add(s.body[i], where + ".rounds[" + std::to_string(i) + "]", spec);
      return;
    }
    const int p = next++;
    for (size_t i = 0; i < s.agents.size(); ++i) {
      const std::string& name = s.agents[i];
      const std::string field = s.kind == Stage::Kind::Parallel ? where + ".parallel[" + std::to_string(i) + "]" : where;
      if (!spec.agent(name)) throw SpecError(field, "no agent named '" + name + "'");
      if (!pos.emplace(name, p).second)
        throw SpecError(field, "agent '" + name + "' appears in more than one stage (a cycle); each agent runs in one stage");
      if (s.kind == Stage::Kind::ForEach) for_each[name] = {&s, where};
    }
  }
};

using ojson = nlohmann::ordered_json;

// What an agent's output looks like to later templates: its output_schema;
// for an agent of a for_each stage, an array of its outputs (strings without
// a schema); null for free text.
ojson output_shape(const AgentSpec& a, const Order& order) {
  if (!order.for_each.count(a.name)) return a.output_schema;
  return ojson{{"type", "array"}, {"items", a.output_schema.is_null() ? ojson{{"type", "string"}} : a.output_schema}};
}

// Checks a structured-output placeholder against the agent's output shape.
void check_output_path(const PipelineSpec& spec, const Order& order, const Placeholder& p, const std::string& field) {
  const AgentSpec* src = spec.agent(p.agent);
  const ojson shape = output_shape(*src, order);
  if (p.path.empty()) return;
  if (shape.is_null())
    throw SpecError(field, "{" + p.text + "}: agent '" + p.agent +
                               "' has no output_schema, so its output is text without fields");
  try {
    schema_at(shape, p.path, "agents." + p.agent + ".output");
  } catch (const PathError& e) {
    throw SpecError(field, "{" + p.text + "}: " + e.what());
  }
}

// A for_each stage's source: an earlier agent's output, at a path the schema says is an array.
void check_for_each(const PipelineSpec& spec, const Order& order, const Stage& s, const std::string& where) {
  const std::string field = where + ".for_each";
  const Placeholder& p = s.source;
  if (!spec.agent(p.agent)) throw SpecError(field, "names an unknown agent '" + p.agent + "'");
  if (order.pos.at(p.agent) >= order.pos.at(s.agents[0]))
    throw SpecError(field, "names agent '" + p.agent + "', which does not run before '" + s.agents[0] + "'");
  const ojson shape = output_shape(*spec.agent(p.agent), order);
  if (shape.is_null())
    throw SpecError(field, "agent '" + p.agent + "' has no output_schema; a for_each stage takes an array from a "
                           "structured output");
  const std::string what = "agents." + p.agent + ".output" + path_text(p.path);
  const ojson* sub = nullptr;
  try {
    sub = schema_at(shape, p.path, "agents." + p.agent + ".output");
  } catch (const PathError& e) {
    throw SpecError(field, e.what());
  }
  if (!sub || !schema_is_array(shape, *sub))
    throw SpecError(field, what + " is not an array in the output_schema of agent '" + p.agent + "'" +
                               (sub ? " (its schema: " + sub->dump() + ")" : " (the schema does not say)"));
}

// {item...} in a for_each agent's prompt: checked against the array's item schema.
void check_item_path(const PipelineSpec& spec, const Order& order, const std::string& agent, const Placeholder& p,
                     const std::string& field) {
  const auto fe = order.for_each.find(agent);
  if (fe == order.for_each.end())
    throw SpecError(field, "{" + p.text + "} is only for an agent of a for_each stage, and '" + agent + "' is not one");
  if (p.path.empty()) return;  // the element itself: the for_each source is checked on its own
  const Placeholder& src = fe->second.first->source;
  const AgentSpec* source_agent = spec.agent(src.agent);
  if (!source_agent)  // a for_each source naming no agent (found by fuzzing: was a null dereference)
    throw SpecError(field, "{" + p.text + "}: the for_each source names an unknown agent '" + src.agent + "'");
  const ojson shape = output_shape(*source_agent, order);
  std::vector<PathStep> path = src.path;
  path.push_back({"", 0});  // an element
  path.insert(path.end(), p.path.begin(), p.path.end());
  try {
    schema_at(shape, path, "agents." + src.agent + ".output");
  } catch (const PathError& e) {
    throw SpecError(field, "{" + p.text + "}: " + e.what());
  }
}

std::vector<AgentSpec> config_shape_agents(const json& list, const Defaults& d, std::vector<Stage>& stages) {
  std::vector<AgentSpec> agents;
  std::map<std::string, int> seen;
  for (size_t i = 0; i < list.size(); ++i) {
    const std::string field = "agents[" + std::to_string(i) + "]";
    if (!list[i].is_string()) mistyped(field, "a string (an agent name) like the other entries", list[i]);
    std::string name = list[i].get<std::string>();
    check_agent_name(name, field);
    const int n = ++seen[name];
    if (n > 1) name += "_" + std::to_string(n);
    AgentSpec a;
    a.name = name;
    a.role = role_of(name);
    a.system = role_system_prompt(a.role);
    a.temperature = d.temperature;
    a.top_p = d.top_p;
    a.max_tokens = d.max_tokens;
    a.retries = d.retries;
    a.timeout_s = d.timeout_s;
    // Consecutive executors fan out in one parallel stage.
    if (a.role == "executor" && !agents.empty() && agents.back().role == "executor") {
      stages.back().kind = Stage::Kind::Parallel;
      stages.back().agents.push_back(name);
    } else {
      stages.push_back(Stage{Stage::Kind::Agent, {name}, {}, "", 1});
    }
    agents.push_back(std::move(a));
  }
  return agents;
}

}  // namespace

const char* context_policy_name(ContextPolicy p) {
  switch (p) {
    case ContextPolicy::Summarize: return "summarize";
    case ContextPolicy::Truncate: return "truncate";
    case ContextPolicy::Fail: return "fail";
  }
  return "?";
}

const AgentSpec* PipelineSpec::agent(const std::string& name) const {
  for (const AgentSpec& a : agents)
    if (a.name == name) return &a;
  return nullptr;
}

std::string item_step_name(const std::string& agent, size_t i) { return agent + "[" + std::to_string(i) + "]"; }

std::string step_agent(const std::string& step_name) {
  const size_t b = step_name.find('[');
  return b == std::string::npos ? step_name : step_name.substr(0, b);
}

std::vector<std::string> stage_agents(const Stage& s) {
  if (s.kind != Stage::Kind::Rounds) return s.agents;
  std::vector<std::string> out;
  for (const Stage& b : s.body)
    for (const std::string& n : b.agents) out.push_back(n);
  return out;
}

std::string role_system_prompt(const std::string& role) {
  if (role == "planner")
    return "You are the planner. Break the task into a short numbered list of concrete steps for the executors. "
           "Write only the plan.";
  if (role == "executor")
    return "You are an executor. Carry out the task following the plan you are given, and report your result "
           "concisely.";
  if (role == "summarizer")
    return "You are the summarizer. Combine the results you are given into one clear, complete final answer to the "
           "task.";
  if (role == "critic")
    return "You are the critic. Check the previous answer against the task; list concrete errors or gaps, or say "
           "that it is correct.";
  return "";
}

PipelineSpec parse_pipeline_spec(const json& j, const SpecContext& ctx) {
  if (!j.is_object()) mistyped("(spec)", "a JSON object", j);
  Fields f(j, "");
  f.only({"name", "task", "model", "max_context", "context_policy", "max_tokens", "temperature", "top_p",
          "enable_batch", "agents", "stages", "max_rounds", "until", "retries", "timeout", "input"});
  PipelineSpec spec;
  spec.name = f.str("name", "");
  spec.task = f.str("task", "");
  spec.model = f.str("model", ctx.model_aliases.empty() ? "" : ctx.model_aliases.front());
  spec.max_context = f.integer("max_context", 0, 0, 1 << 24);
  const std::string policy = f.str("context_policy", "summarize");
  if (policy == "summarize") spec.context_policy = ContextPolicy::Summarize;
  else if (policy == "truncate") spec.context_policy = ContextPolicy::Truncate;
  else if (policy == "fail") spec.context_policy = ContextPolicy::Fail;
  else throw SpecError("context_policy", "must be 'summarize', 'truncate' or 'fail', got '" + policy + "'");
  spec.enable_batch = f.boolean("enable_batch", true);
  Defaults d;
  d.temperature = (float)f.num("temperature", d.temperature, 0, 2);
  d.top_p = (float)f.num("top_p", d.top_p, 0, 1);
  d.max_tokens = f.integer("max_tokens", d.max_tokens, 1, 1 << 20);
  d.retries = f.integer("retries", 0, 0, 2);
  d.timeout_s = f.num("timeout", 0, 0, 86400);

  const json* agents = f.find("agents");
  if (!agents) throw SpecError("agents", "is required");
  if (!agents->is_array() || agents->empty()) mistyped("agents", "a non-empty array", *agents);
  if (agents->size() > 64) throw SpecError("agents", "at most 64 agents");

  const bool config_shape = (*agents)[0].is_string();
  if (config_shape) {
    if (f.has("stages")) throw SpecError("stages", "not allowed with a list of agent names; give agent objects");
    spec.agents = config_shape_agents(*agents, d, spec.stages);
  } else {
    for (size_t i = 0; i < agents->size(); ++i) {
      AgentSpec a = parse_agent((*agents)[i], "agents[" + std::to_string(i) + "]", d);
      if (spec.agent(a.name))
        throw SpecError("agents[" + std::to_string(i) + "].name", "duplicate agent name '" + a.name + "'");
      spec.agents.push_back(std::move(a));
    }
    if (const json* st = f.find("stages")) {
      if (!st->is_array() || st->empty()) mistyped("stages", "a non-empty array", *st);
      if (f.has("max_rounds") || f.has("until"))
        throw SpecError("max_rounds", "with 'stages', put max_rounds and until in a rounds stage");
      for (size_t i = 0; i < st->size(); ++i)
        spec.stages.push_back(parse_stage((*st)[i], "stages[" + std::to_string(i) + "]", false));
    }
  }
  if (config_shape || !f.has("stages")) {
    // The chain: every agent in order, repeated up to max_rounds (until the marker, if given).
    std::vector<Stage> chain;
    if (config_shape) chain = std::move(spec.stages);
    else
      for (const AgentSpec& a : spec.agents) chain.push_back(Stage{Stage::Kind::Agent, {a.name}, {}, "", 1});
    const int max_rounds = f.integer("max_rounds", 1, 1, 100);
    const std::string until = f.str("until", "");
    spec.stages.clear();
    if (max_rounds > 1 || !until.empty())
      spec.stages.push_back(Stage{Stage::Kind::Rounds, {}, std::move(chain), until, max_rounds});
    else
      spec.stages = std::move(chain);
  }

  Order order;
  for (size_t i = 0; i < spec.stages.size(); ++i) order.add(spec.stages[i], "stages[" + std::to_string(i) + "]", spec);

  for (size_t i = 0; i < spec.agents.size(); ++i) {
    AgentSpec& a = spec.agents[i];
    const std::string where = "agents[" + std::to_string(i) + "]";
    if (!order.pos.count(a.name)) throw SpecError(where, "agent '" + a.name + "' is in no stage");
    if (a.model.empty()) a.model = spec.model;
    if (!ctx.model_aliases.empty() &&
        std::find(ctx.model_aliases.begin(), ctx.model_aliases.end(), a.model) == ctx.model_aliases.end()) {
      std::string known;
      for (const std::string& m : ctx.model_aliases) known += (known.empty() ? "" : ", ") + m;
      throw SpecError(config_shape ? std::string("model") : where + ".model",
                      "unknown model '" + a.model + "' (known models: " + known + ")");
    }
    std::vector<Placeholder> ph;
    try {
      ph = template_placeholders(a.prompt);
    } catch (const std::invalid_argument& e) {
      throw SpecError(where + ".prompt", e.what());
    }
    bool uses_item = false;
    for (const Placeholder& p : ph) {
      if (p.kind == Placeholder::Kind::Item) {
        check_item_path(spec, order, a.name, p, where + ".prompt");
        uses_item = true;
      }
      if (p.kind != Placeholder::Kind::AgentOutput) continue;
      if (!spec.agent(p.agent)) throw SpecError(where + ".prompt", "names an unknown agent '" + p.agent + "'");
      if (order.pos.at(p.agent) >= order.pos.at(a.name))
        throw SpecError(where + ".prompt", "names agent '" + p.agent + "', which does not run before '" + a.name + "'");
      check_output_path(spec, order, p, where + ".prompt");
    }
    if (order.for_each.count(a.name) && !ph.empty() && !uses_item)
      throw SpecError(where + ".prompt", "agent '" + a.name + "' runs once per element of a for_each stage; its "
                                         "prompt must use {item} (or no placeholder at all: the element is appended)");
  }
  for (const auto& [name, stage] : order.for_each) check_for_each(spec, order, *stage.first, stage.second);
  return spec;
}

}  // namespace spool::agents
