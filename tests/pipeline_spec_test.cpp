// Pipeline specs: the three shapes parse into the stages they mean; every
// invalid spec is refused with the offending field named; templates render
// their placeholders and refuse typos; the SQLite store keeps runs, steps,
// events and logs across reopening and refuses a second process.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <nlohmann/json.hpp>

#include "agents/kv_hints.h"
#include "agents/pipeline_spec.h"
#include "agents/prompt_template.h"
#include "agents/run_store.h"
#include "agents/spec_yaml.h"
#include "core/error.h"

namespace spool::agents {
namespace {

using nlohmann::json;
const SpecContext kCtx{{"small", "big"}};

std::string field_of(const json& j) {
  try {
    parse_pipeline_spec(j, kCtx);
  } catch (const SpecError& e) {
    return e.field;
  }
  return "(accepted)";
}

TEST(PipelineSpec, ChainShapeIsRoundsOverTheAgentsInOrder) {
  const PipelineSpec s = parse_pipeline_spec(json::parse(R"({"task": "write a poem", "max_rounds": 3,
    "agents": [{"name": "writer", "prompt": "Write: {task}", "temperature": 0.2},
               {"name": "editor", "prompt": "Improve: {previous}"}]})"),
                                             kCtx);
  EXPECT_EQ(s.task, "write a poem");
  ASSERT_EQ(s.stages.size(), 1u);
  EXPECT_EQ(s.stages[0].kind, Stage::Kind::Rounds);
  EXPECT_EQ(s.stages[0].max_rounds, 3);
  EXPECT_EQ(stage_agents(s.stages[0]), (std::vector<std::string>{"writer", "editor"}));
  EXPECT_FLOAT_EQ(s.agent("writer")->temperature, 0.2f);
  EXPECT_EQ(s.agent("editor")->model, "small");  // the first alias is the default model
}

TEST(PipelineSpec, ConfigShapeGivesRolesAndFansOutExecutors) {
  const PipelineSpec s = parse_pipeline_spec(json::parse(R"({"model": "big", "max_context": 2048, "max_tokens": 100,
    "temperature": 0.5, "agents": ["planner", "executor", "executor", "summarizer"], "enable_batch": false})"),
                                             kCtx);
  ASSERT_EQ(s.agents.size(), 4u);
  EXPECT_EQ(s.agents[2].name, "executor_2");
  EXPECT_EQ(s.agents[2].role, "executor");
  EXPECT_EQ(s.agents[0].model, "big");
  EXPECT_EQ(s.agents[3].max_tokens, 100);
  EXPECT_FALSE(s.agents[0].system.empty());
  EXPECT_FALSE(s.enable_batch);
  EXPECT_EQ(s.max_context, 2048);
  ASSERT_EQ(s.stages.size(), 3u);
  EXPECT_EQ(s.stages[1].kind, Stage::Kind::Parallel);
  EXPECT_EQ(s.stages[1].agents, (std::vector<std::string>{"executor", "executor_2"}));
}

TEST(PipelineSpec, NativeStagesWithParallelAndRounds) {
  const PipelineSpec s = parse_pipeline_spec(json::parse(R"({"agents": [
      {"name": "p", "prompt": "{task}"}, {"name": "a", "prompt": "{previous}"}, {"name": "b", "prompt": "{agents.p.output}"},
      {"name": "c", "prompt": "{agents.a.output} {agents.b.output} round {round}", "retries": 2, "timeout": 30}],
    "stages": ["p", {"parallel": ["a", "b"]}, {"rounds": [{"agent": "c"}], "until": "DONE", "max_rounds": 4}]})"),
                                             kCtx);
  ASSERT_EQ(s.stages.size(), 3u);
  EXPECT_EQ(s.stages[2].kind, Stage::Kind::Rounds);
  EXPECT_EQ(s.stages[2].until, "DONE");
  EXPECT_EQ(s.agent("c")->retries, 2);
  EXPECT_DOUBLE_EQ(s.agent("c")->timeout_s, 30);
}

TEST(PipelineSpec, BadSpecsNameTheField) {
  EXPECT_EQ(field_of(json::parse(R"({"task": "x"})")), "agents");
  EXPECT_EQ(field_of(json::parse(R"({"agents": []})")), "agents");
  EXPECT_EQ(field_of(json::parse(R"({"agents": [{"prompt": "x"}]})")), "agents[0].name");
  EXPECT_EQ(field_of(json::parse(R"({"agents": [{"name": "a"}]})")), "agents[0].prompt");
  EXPECT_EQ(field_of(json::parse(R"({"agents": [{"name": "a", "prompt": 3}]})")), "agents[0].prompt");
  EXPECT_EQ(field_of(json::parse(R"({"agents": [{"name": "a", "prompt": "x", "temperature": 5}]})")),
            "agents[0].temperature");
  EXPECT_EQ(field_of(json::parse(R"({"agents": [{"name": "a", "prompt": "x", "retries": 3}]})")), "agents[0].retries");
  EXPECT_EQ(field_of(json::parse(R"({"agents": [{"name": "a", "prompt": "x", "max_tokens": 0}]})")),
            "agents[0].max_tokens");
  EXPECT_EQ(field_of(json::parse(R"({"agents": [{"name": "a", "prompt": "x", "model": "nope"}]})")), "agents[0].model");
  EXPECT_EQ(field_of(json::parse(R"({"agents": [{"name": "a", "prompt": "x", "colour": "red"}]})")), "agents[0].colour");
  EXPECT_EQ(field_of(json::parse(R"({"agents": [{"name": "a", "prompt": "x"}, {"name": "a", "prompt": "y"}]})")),
            "agents[1].name");
  EXPECT_EQ(field_of(json::parse(R"({"agents": [{"name": "a b", "prompt": "x"}]})")), "agents[0].name");
  // Templates: unknown agent, a later agent, itself, a parallel sibling, a typo.
  EXPECT_EQ(field_of(json::parse(R"({"agents": [{"name": "a", "prompt": "{agents.zz.output}"}]})")), "agents[0].prompt");
  EXPECT_EQ(field_of(json::parse(R"({"agents": [{"name": "a", "prompt": "{agents.b.output}"}, {"name": "b", "prompt": "x"}]})")),
            "agents[0].prompt");
  EXPECT_EQ(field_of(json::parse(R"({"agents": [{"name": "a", "prompt": "{agents.a.output}"}]})")), "agents[0].prompt");
  EXPECT_EQ(field_of(json::parse(R"({"agents": [{"name": "a", "prompt": "x"}, {"name": "b", "prompt": "{agents.a.output}"}],
                                     "stages": [{"parallel": ["a", "b"]}]})")),
            "agents[1].prompt");
  EXPECT_EQ(field_of(json::parse(R"({"agents": [{"name": "a", "prompt": "{tsak}"}]})")), "agents[0].prompt");
  // Stages: an agent twice (a cycle), an unknown agent, an agent in no stage, nested rounds, bad max_rounds.
  EXPECT_EQ(field_of(json::parse(R"({"agents": [{"name": "a", "prompt": "x"}], "stages": ["a", "a"]})")), "stages[1]");
  EXPECT_EQ(field_of(json::parse(R"({"agents": [{"name": "a", "prompt": "x"}], "stages": ["a", "q"]})")), "stages[1]");
  EXPECT_EQ(field_of(json::parse(R"({"agents": [{"name": "a", "prompt": "x"}, {"name": "b", "prompt": "x"}], "stages": ["a"]})")),
            "agents[1]");
  EXPECT_EQ(field_of(json::parse(R"({"agents": [{"name": "a", "prompt": "x"}],
                                     "stages": [{"rounds": [{"rounds": ["a"]}]}]})")),
            "stages[0].rounds[0].rounds");
  EXPECT_EQ(field_of(json::parse(R"({"agents": [{"name": "a", "prompt": "x"}], "stages": [{"rounds": ["a"], "max_rounds": 0}]})")),
            "stages[0].max_rounds");
  EXPECT_EQ(field_of(json::parse(R"({"agents": [{"name": "a", "prompt": "x"}], "max_rounds": "3"})")), "max_rounds");
  EXPECT_EQ(field_of(json::parse(R"({"agents": [{"name": "a", "prompt": "x"}], "context_policy": "drop"})")),
            "context_policy");
  EXPECT_EQ(field_of(json::parse(R"({"agents": ["planner"], "model": "nope"})")), "model");
  EXPECT_EQ(field_of(json::parse(R"({"agents": ["planner", 3]})")), "agents[1]");
  EXPECT_EQ(field_of(json::parse(R"([1, 2])")), "(spec)");
}

TEST(PromptTemplate, RendersPlaceholdersAndKeepsOtherBraces) {
  TemplateVars v;
  v.task = "T";
  v.input = "I";
  v.previous = "P";
  v.round = 3;
  v.value = [](const Placeholder& p) { return p.agent == "x" ? std::string("X!") : std::string(); };
  const std::vector<PromptPiece> p =
      render_template(R"({task}/{input}/{previous}/{round}/{agents.x.output} {"json": 1} {{task}} {} {a b})", v);
  EXPECT_EQ(join_pieces(p), R"(T/I/P/3/X! {"json": 1} {task} {} {a b})");
  int history = 0;
  for (const PromptPiece& piece : p) history += piece.history;
  EXPECT_EQ(history, 2);  // {previous} and {agents.x.output}
  EXPECT_THROW(template_placeholders("{agent.x.output}"), std::invalid_argument);
  EXPECT_THROW(template_placeholders("{Task}"), std::invalid_argument);
  EXPECT_TRUE(template_placeholders("no placeholders {1: 2}").empty());
}

TEST(RunStore, KeepsRunsAcrossReopenAndRefusesASecondProcess) {
  const std::string dir = (std::filesystem::temp_directory_path() / ("spool-store-test-" + std::to_string(getpid()))).string();
  std::filesystem::remove_all(dir);
  {
    RunStore store(dir);
    EXPECT_THROW(RunStore second(dir), Error);
    RunRecord r;
    r.id = "run_1";
    r.spec = json{{"agents", json::array()}};
    r.input = "hello";
    r.status = "queued";
    store.create_run(r);
    store.set_run_status("run_1", "running");
    StepRecord st;
    st.agent = "a";
    st.status = "done";
    st.output = "out";
    st.tokens = 3;
    store.put_step("run_1", st);
    store.add_event("run_1", 1, json{{"type", "start"}});
    store.add_event("run_1", 2, json{{"type", "output"}});
    store.add_log("run_1", "[agent:a] DONE");
    store.put_spec("s", json{{"agents", json::array({"planner"})}});
  }
  RunStore store(dir);
  const auto r = store.get_run("run_1");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, "running");
  EXPECT_GT(r->started_at, 0);
  EXPECT_EQ(r->input, "hello");
  ASSERT_EQ(store.steps("run_1").size(), 1u);
  EXPECT_EQ(store.steps("run_1")[0].output, "out");
  EXPECT_EQ(store.events("run_1", 1).size(), 1u);
  EXPECT_EQ(store.last_event_seq("run_1"), 2);
  EXPECT_EQ(store.logs("run_1"), std::vector<std::string>{"[agent:a] DONE"});
  EXPECT_EQ(store.runs_with_status("pipeline", "running").size(), 1u);
  EXPECT_TRUE(store.get_spec("s"));
  EXPECT_FALSE(store.get_spec("t"));
  store.set_run_status("run_1", "completed");
  EXPECT_GT(store.get_run("run_1")->finished_at, 0);
  std::filesystem::remove_all(dir);
}


// What a run can tell the engine about its next prompts: each template up to
// the first output that is not final yet.
TEST(PipelineHints, KnownPrefixStopsAtTheFirstOutputNotFinalYet) {
  const PipelineSpec s = parse_pipeline_spec(json::parse(R"({"task": "T", "agents": [
      {"name": "plan", "prompt": "{task}|plan"},
      {"name": "e0", "prompt": "{task}|{agents.plan.output}|e0 r{round}"},
      {"name": "e1", "prompt": "go"},
      {"name": "join", "prompt": "{task}|{agents.plan.output}|{previous}|end"}],
      "stages": ["plan", {"parallel": ["e0", "e1"]}, "join"]})"),
                                             kCtx);
  const std::vector<PlanItem> plan = unroll_stages(s);
  ASSERT_EQ(plan.size(), 3u);
  RunView before{&s, "", &plan, {}};
  EXPECT_EQ(known_prompt_prefix(before, *s.agent("e0"), 0, 1), "T|");            // plan's output not there yet
  EXPECT_EQ(known_prompt_prefix(before, *s.agent("e1"), 0, 1), "go\n\nTask: T");  // no placeholders: task follows
  RunView after_plan{&s, "", &plan, {{"plan", AgentOutput{"P", nullptr, false}}}};
  EXPECT_EQ(known_prompt_prefix(after_plan, *s.agent("e0"), 1, 1), "T|P|e0 r1");  // everything known
  EXPECT_EQ(known_prompt_prefix(after_plan, *s.agent("join"), 1, 2), "T|P|");     // {previous} is the stage running
  // An agent that runs again before the item is not final.
  EXPECT_EQ(known_prompt_prefix(after_plan, *s.agent("e0"), 0, 1), "T|");
}

}  // namespace
}  // namespace spool::agents

namespace spool::agents {
namespace {

TEST(SpecYaml, TheYamlChainExampleIsTheJsonOne) {
  const std::string dir = std::string(SPOOL_SOURCE_DIR) + "/examples/agents/";
  std::ifstream y(dir + "chain.yaml"), j(dir + "chain.json");
  std::stringstream ys, js;
  ys << y.rdbuf();
  js << j.rdbuf();
  // Equal keys in equal order (specs keep the order written).
  EXPECT_EQ(yaml_to_json(ys.str()), SpecJson::parse(js.str()));
  EXPECT_EQ(parse_spec_text(js.str()), SpecJson::parse(js.str()));
  EXPECT_EQ(yaml_to_json(ys.str()).begin().key(), "task");
}

TEST(SpecYaml, ScalarsAndErrors) {
  const json j = yaml_to_json("a: 1\nb: 0.5\nc: true\nd: ~\ne: '12'\nf: hello world\ng: [1, x]\nh: -3\n");
  EXPECT_EQ(j, json::parse(R"({"a": 1, "b": 0.5, "c": true, "d": null, "e": "12", "f": "hello world", "g": [1, "x"], "h": -3})"));
  try {
    yaml_to_json("agents:\n  - name: a\n   prompt: [unclosed\n");
    FAIL() << "malformed YAML accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("line "), std::string::npos) << e.what();
  }
  // yaml-cpp passes bytes through; invalid UTF-8 in a key or a value is the spec's error, with its place
  // (found by fuzzing: such a key in an output_schema reached nlohmann's serialiser and terminated).
  for (const std::string bad : {std::string("a: 1\n\xC3 b: 2\n"), std::string("a:\n  b: x\xFFy\n")}) {
    try {
      yaml_to_json(bad);
      FAIL() << "invalid UTF-8 accepted";
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find("line 2"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("invalid UTF-8"), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace spool::agents
