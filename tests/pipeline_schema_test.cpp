// Structured agent outputs in pipeline specs: an output_schema compiles or is
// refused naming the field; {agents.X.output.path} and {item.path} are
// checked against the schemas where they tell; a for_each stage needs an
// earlier agent's array; paths into values fail with messages that name
// what is missing. (The runs themselves: tests/api/pipeline_schemas.test.mjs.)
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "agents/agent_output.h"
#include "agents/kv_hints.h"
#include "agents/pipeline_spec.h"
#include "agents/prompt_template.h"

namespace spool::agents {
namespace {

using nlohmann::json;
using ojson = nlohmann::ordered_json;
const SpecContext kCtx{{"small"}};

const char* kPlanSchema = R"({"type": "object", "properties": {
    "goal": {"type": "string"},
    "steps": {"type": "array", "items": {"$ref": "#/$defs/step"}, "minItems": 1, "maxItems": 4}},
  "required": ["goal", "steps"],
  "$defs": {"step": {"type": "object", "properties": {"title": {"type": "string"}, "minutes": {"type": "integer"}},
                     "required": ["title", "minutes"]}}})";

// planner (schema) -> executor per step -> summarizer; `patch` edits the spec first.
json plan_spec() {
  json s = json::parse(R"({"task": "a picnic", "agents": [
      {"name": "planner", "prompt": "Plan {task}"},
      {"name": "executor", "prompt": "Do {item.title} ({item.minutes} min) for {agents.planner.output.goal}"},
      {"name": "summarizer", "prompt": "First: {agents.executor.output[0]}; all: {agents.executor.output}"}],
    "stages": ["planner", {"for_each": "agents.planner.output.steps", "agent": "executor"}, "summarizer"]})");
  s["agents"][0]["output_schema"] = json::parse(kPlanSchema);
  return s;
}

// The field a spec is refused at, and its message.
std::pair<std::string, std::string> refusal(const json& j) {
  try {
    parse_pipeline_spec(j, kCtx);
  } catch (const SpecError& e) {
    return {e.field, e.what()};
  }
  return {"(accepted)", ""};
}

TEST(PipelineSchema, ForEachOverAStructuredArrayParses) {
  const PipelineSpec s = parse_pipeline_spec(plan_spec(), kCtx);
  ASSERT_EQ(s.stages.size(), 3u);
  EXPECT_EQ(s.stages[1].kind, Stage::Kind::ForEach);
  EXPECT_EQ(s.stages[1].agents, std::vector<std::string>{"executor"});
  EXPECT_EQ(s.stages[1].source.agent, "planner");
  EXPECT_EQ(path_text(s.stages[1].source.path), ".steps");
  EXPECT_EQ(s.stages[1].max_items, 16);
  EXPECT_EQ(s.agent("planner")->output_schema["required"], ojson::parse(R"(["goal", "steps"])"));
  EXPECT_TRUE(s.agent("executor")->output_schema.is_null());
}

TEST(PipelineSchema, BadSchemasAndPathsNameTheField) {
  json j = plan_spec();
  j["agents"][0]["output_schema"] = "object";
  EXPECT_EQ(refusal(j).first, "agents[0].output_schema");
  j["agents"][0]["output_schema"] = json::parse(R"({"type": "integr"})");
  auto [field, msg] = refusal(j);
  EXPECT_EQ(field, "agents[0].output_schema");
  EXPECT_NE(msg.find("integr"), std::string::npos) << msg;

  j = plan_spec();
  j["agents"][1]["prompt"] = "Do {item.title} for {agents.planner.output.budget}";
  std::tie(field, msg) = refusal(j);
  EXPECT_EQ(field, "agents[1].prompt");
  EXPECT_NE(msg.find("no property 'budget'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("goal, steps"), std::string::npos) << msg;

  j = plan_spec();
  j["agents"][1]["prompt"] = "Do {item.name}";
  std::tie(field, msg) = refusal(j);
  EXPECT_EQ(field, "agents[1].prompt");
  EXPECT_NE(msg.find("no property 'name'"), std::string::npos) << msg;

  j = plan_spec();
  j["agents"][1]["prompt"] = "Do {item.title[0]}";  // a string is not an array
  EXPECT_EQ(refusal(j).first, "agents[1].prompt");

  j = plan_spec();
  j["agents"][2]["prompt"] = "{item}";  // not a for_each agent
  EXPECT_EQ(refusal(j).first, "agents[2].prompt");

  j = plan_spec();
  j["agents"][1]["prompt"] = "Do {agents.planner.output.goal}";  // a for_each agent must use its element
  EXPECT_EQ(refusal(j).first, "agents[1].prompt");
  j["agents"][1]["prompt"] = "Do it";  // no placeholder at all: the element is appended
  EXPECT_EQ(refusal(j).first, "(accepted)");

  j = plan_spec();
  j["agents"][1].erase("prompt");
  j["agents"][1]["role"] = "executor";
  j["agents"][1]["prompt"] = "{item.title}";
  j["agents"][2]["prompt"] = "{agents.executor.output[0].x}";  // the executor's outputs are strings
  EXPECT_EQ(refusal(j).first, "agents[2].prompt");

  j = plan_spec();
  j["agents"][0].erase("output_schema");
  std::tie(field, msg) = refusal(j);
  EXPECT_EQ(field, "agents[1].prompt");
  EXPECT_NE(msg.find("'planner' has no output_schema"), std::string::npos) << msg;
}

TEST(PipelineSchema, ForEachSourceMustBeAnEarlierArray) {
  json j = plan_spec();
  j["stages"][1]["for_each"] = "agents.planner.output.goal";
  j["agents"][1]["prompt"] = "Do {item}";
  auto [field, msg] = refusal(j);
  EXPECT_EQ(field, "stages[1].for_each");
  EXPECT_NE(msg.find("not an array"), std::string::npos) << msg;

  j = plan_spec();
  j["agents"][1]["prompt"] = "Do it";
  j["agents"][0].erase("output_schema");
  std::tie(field, msg) = refusal(j);
  EXPECT_EQ(field, "stages[1].for_each");
  EXPECT_NE(msg.find("no output_schema"), std::string::npos) << msg;

  j = plan_spec();
  j["stages"][1]["for_each"] = "agents.summarizer.output.steps";
  EXPECT_EQ(refusal(j).first, "stages[1].for_each");
  j["stages"][1]["for_each"] = "planner.steps";
  EXPECT_EQ(refusal(j).first, "stages[1].for_each");
  j["stages"][1]["for_each"] = "{agents.planner.output.steps}";  // braces are fine
  EXPECT_EQ(refusal(j).first, "(accepted)");
  j["stages"][1]["max_items"] = 0;
  EXPECT_EQ(refusal(j).first, "stages[1].max_items");
  j["stages"][1].erase("max_items");
  j["stages"][1]["parallel"] = json::array({"executor"});
  EXPECT_EQ(refusal(j).first, "stages[1].parallel");
  j["stages"][1].erase("parallel");
  j["stages"][1].erase("agent");
  EXPECT_EQ(refusal(j).first, "stages[1].agent");
  // Inside rounds too.
  j = plan_spec();
  j["stages"] = json::parse(R"(["planner", {"rounds": [{"for_each": "agents.planner.output.steps", "agent": "executor"},
                                                      "summarizer"], "max_rounds": 2}])");
  EXPECT_EQ(refusal(j).first, "(accepted)");
}

TEST(PipelineSchema, PathsIntoValues) {
  const ojson v = ojson::parse(R"({"goal": "fun", "steps": [{"title": "pack", "minutes": 5}], "n": 3})");
  const auto path = [](const std::string& t) { return parse_placeholder("agents.p.output" + t).path; };
  EXPECT_EQ(value_text(value_at(v, path(".goal"), "x")), "fun");
  EXPECT_EQ(value_text(value_at(v, path(".steps[0].title"), "x")), "pack");
  EXPECT_EQ(value_text(value_at(v, path(".steps.0.minutes"), "x")), "5");
  EXPECT_EQ(value_text(value_at(v, path(".steps"), "x")), R"([{"title":"pack","minutes":5}])");
  EXPECT_EQ(value_text(value_at(v, {}, "x")), v.dump());
  const auto error = [&](const std::string& t) {
    try {
      value_at(v, path(t), "agents.p.output");
    } catch (const PathError& e) {
      return std::string(e.what());
    }
    return std::string("(found)");
  };
  EXPECT_EQ(error(".steps[1]"), "agents.p.output.steps has 1 element, no [1]");
  EXPECT_EQ(error(".plan"), "agents.p.output has no member 'plan'");
  EXPECT_EQ(error(".n.x"), "agents.p.output.n is a number, not an object (member 'x')");
}

TEST(PipelineSchema, PlaceholderPaths) {
  const std::vector<Placeholder> ph = template_placeholders("{agents.p.output.steps[12].title} {item} {item[0].x} {x[0]}");
  ASSERT_EQ(ph.size(), 3u);  // {x[0]} is literal text
  EXPECT_EQ(ph[0].kind, Placeholder::Kind::AgentOutput);
  EXPECT_EQ(ph[0].agent, "p");
  ASSERT_EQ(ph[0].path.size(), 3u);
  EXPECT_EQ(ph[0].path[1].index, 12);
  EXPECT_EQ(path_text(ph[0].path), ".steps[12].title");
  EXPECT_EQ(ph[1].kind, Placeholder::Kind::Item);
  EXPECT_TRUE(ph[1].path.empty());
  EXPECT_EQ(path_text(ph[2].path), "[0].x");
  EXPECT_THROW(template_placeholders("{agents.p.output[x]}"), std::invalid_argument);
  EXPECT_THROW(template_placeholders("{agents.p.output..a}"), std::invalid_argument);
  EXPECT_THROW(template_placeholders("{items}"), std::invalid_argument);
}

TEST(PipelineSchema, SchemaPathsWhereTheSchemaTells) {
  const ojson schema = ojson::parse(kPlanSchema);
  const auto at = [&](const std::string& t) { return schema_at(schema, parse_placeholder("agents.p.output" + t).path, "o"); };
  EXPECT_EQ((*at(".steps[0].minutes"))["type"], "integer");
  EXPECT_TRUE(schema_is_array(schema, *at(".steps")));
  EXPECT_THROW(at(".goal.x"), PathError);
  const ojson open = ojson::parse(R"({"type": "object", "additionalProperties": true})");
  EXPECT_EQ(schema_at(open, parse_placeholder("agents.p.output.anything").path, "o"), nullptr);  // not known: allowed
  const ojson any = ojson::parse(R"({"anyOf": [{"type": "object", "properties": {"a": {"type": "string"}}},
                                               {"type": "object", "properties": {"b": {"type": "string"}}}]})");
  EXPECT_EQ(schema_at(any, parse_placeholder("agents.p.output.b").path, "o"), nullptr);
  EXPECT_THROW(schema_at(any, parse_placeholder("agents.p.output.c").path, "o"), PathError);
}

TEST(PipelineSchema, HintPrefixStopsAtTheElement) {
  const PipelineSpec spec = parse_pipeline_spec(plan_spec(), kCtx);
  const std::vector<PlanItem> plan = unroll_stages(spec);
  RunView view{&spec, "", &plan, {}};
  view.outputs["planner"] = AgentOutput{R"({"goal": "fun", "steps": []})", ojson::parse(R"({"goal": "fun", "steps": []})"), true};
  EXPECT_EQ(known_prompt_prefix(view, *spec.agent("executor"), 1, 1), "Do ");
  view.outputs["executor"] = AgentOutput{"[executor[0]]\nok", ojson::parse(R"(["ok"])"), true};
  EXPECT_EQ(known_prompt_prefix(view, *spec.agent("summarizer"), 2, 2), "First: ok; all: [executor[0]]\nok");
}

}  // namespace
}  // namespace spool::agents
