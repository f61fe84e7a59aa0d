#include "agents/kv_hints.h"

#include <set>

#include "agents/prompt_template.h"
#include "model/model.h"

namespace spool::agents {

std::vector<PlanItem> unroll_stages(const PipelineSpec& spec) {
  std::vector<PlanItem> plan;
  for (const Stage& s : spec.stages) {
    if (s.kind != Stage::Kind::Rounds) {
      plan.push_back({&s, 1});
      continue;
    }
    for (int round = 1; round <= s.max_rounds; ++round)
      for (const Stage& b : s.body) plan.push_back({&b, round});
  }
  return plan;
}

std::vector<int32_t> agent_prompt_tokens(const AgentSpec& a, const AgentModel& m, const std::string& user) {
  const Tokenizer& tok = m.engine->model().tokenizer();
  if (m.chat_template) {
    std::vector<ChatMessage> msgs;
    if (!a.system.empty()) msgs.push_back(ChatMessage{"system", a.system});
    msgs.push_back(ChatMessage{"user", user});
    return chat_prompt_tokens(msgs, tok, *m.chat_template);
  }
  return tok.encode(a.system.empty() ? user : a.system + "\n\n" + user, true, false);
}

std::string known_prompt_prefix(const RunView& run, const AgentSpec& a, size_t pos, size_t item) {
  const PipelineSpec& spec = *run.spec;
  const std::string task = spec.task.empty() ? run.input : spec.task;
  // No placeholders: the task follows the prompt, then the previous stage's output (RunExecutor::build_prompt).
  if (template_placeholders(a.prompt).empty()) return (a.prompt.empty() ? "" : a.prompt + "\n\n") + "Task: " + task;
  std::set<std::string> pending;
  for (size_t k = pos; k < item; ++k)
    for (const std::string& n : (*run.plan)[k].stage->agents) pending.insert(n);
  TemplateVars v;
  v.task = task;
  v.input = run.input.empty() ? task : run.input;
  v.round = (*run.plan)[item].round;
  std::vector<Placeholder> history;  // the placeholders behind the history pieces, in order
  for (const Placeholder& p : template_placeholders(a.prompt))
    if (p.kind == Placeholder::Kind::Previous || p.kind == Placeholder::Kind::AgentOutput ||
        p.kind == Placeholder::Kind::Item)
      history.push_back(p);
  std::string text;
  size_t h = 0;
  for (const PromptPiece& piece : render_template(a.prompt, v)) {
    if (piece.history) {
      const Placeholder& p = history[h++];
      const auto out = run.outputs.find(p.agent);
      if (p.kind != Placeholder::Kind::AgentOutput || pending.count(p.agent) || out == run.outputs.end()) break;
      if (p.path.empty()) {
        text += out->second.text;
        continue;
      }
      if (!out->second.structured) break;
      try {
        text += value_text(value_at(out->second.value, p.path, p.agent));
      } catch (const PathError&) {
        break;  // the step will fail when it renders this
      }
      continue;
    }
    text += piece.text;
  }
  return text;
}

void add_run_hints(const RunView& run, const ModelResolver& resolve, size_t pos, size_t first, int distance,
                   std::map<Engine*, std::vector<PrefixHint>>& out) {
  const std::vector<PlanItem>& plan = *run.plan;
  for (size_t k = first; k < plan.size() && k < first + kHintLookahead; ++k) {
    for (const std::string& name : plan[k].stage->agents) {
      const AgentSpec* a = run.spec->agent(name);
      const AgentModel m = resolve(a->model);
      if (!m.engine) continue;
      const std::string text = known_prompt_prefix(run, *a, pos, k);
      if (text.empty() && a->system.empty()) continue;
      out[m.engine].push_back({agent_prompt_tokens(*a, m, text), distance + (int)(k - first)});
    }
  }
}

}  // namespace spool::agents
