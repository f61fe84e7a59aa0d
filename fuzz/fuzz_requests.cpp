// Fuzz entries for what clients send: OpenAI request bodies (parsed as the
// server parses them, validated for both endpoints, turned into engine
// parameters through a real tokenizer and chat template, errors rendered as
// the server renders them) and pipeline specs (JSON or YAML, validated, their
// prompt templates rendered).
#include <httplib.h>

#include <nlohmann/json.hpp>
#include <string>

#include "agents/pipeline_spec.h"
#include "agents/prompt_template.h"
#include "agents/spec_yaml.h"
#include "core/error.h"
#include "format/gguf.h"
#include "fuzz_targets.h"
#include "server/api_error.h"
#include "server/openai_format.h"
#include "server/openai_request.h"
#include "server/server_context.h"
#include "text/chat_template.h"
#include "text/tokenizer.h"

namespace spool::fuzz {

namespace {

struct PromptModel {
  std::unique_ptr<Tokenizer> tokenizer;
  std::unique_ptr<ChatTemplate> chat_template;
};

// stories260K's tokenizer and a ChatML template (the shape most chat models use).
const PromptModel& prompt_model() {
  static const PromptModel m = [] {
    PromptModel pm;
    const std::string path = shared_dir() + "/models/stories260K.gguf";
    try {
      pm.tokenizer = load_tokenizer(gguf::open(path));
    } catch (const Error& e) {
      std::fprintf(stderr, "fuzz openai_request: cannot load %s (set SPOOL_FUZZ_SHARED): %s\n", path.c_str(), e.what());
      std::abort();
    }
    pm.chat_template = std::make_unique<ChatTemplate>(
        "{% for m in messages %}{{ '<|im_start|>' + m['role'] + '\\n' + m['content'] + '<|im_end|>\\n' }}"
        "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}");
    return pm;
  }();
  return m;
}

}  // namespace

int openai_request(const uint8_t* data, size_t size) {
  httplib::Request req;
  req.body.assign(reinterpret_cast<const char*>(data), size);
  const PromptModel& model = prompt_model();
  const server::PromptContext ctx{model.tokenizer.get(), model.chat_template.get(), 256};
  nlohmann::json body;
  try {
    body = server::parse_json_body(req);
  } catch (const server::ApiError& e) {
    (void)server::dump_json(server::error_json(e));
    return 0;
  }
  for (server::Endpoint ep : {server::Endpoint::Completions, server::Endpoint::ChatCompletions}) {
    try {
      const server::ApiRequest r = server::parse_api_request(body, ep);
      (void)server::to_request_params(r, ctx);
    } catch (const server::ApiError& e) {
      (void)server::dump_json(server::error_json(e));
    }
  }
  return 0;
}

int pipeline_spec(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  agents::PipelineSpec spec;
  try {
    const agents::SpecJson j = agents::parse_spec_text(text);
    spec = agents::parse_pipeline_spec(j, agents::SpecContext{{"default", "small"}});
  } catch (const agents::SpecError&) {
    return 0;
  } catch (const std::invalid_argument&) {  // malformed JSON or YAML, with line and column
    return 0;
  }
  agents::TemplateVars vars;
  vars.task = "the task";
  vars.input = "the input";
  vars.previous = "before";
  vars.value = [](const agents::Placeholder& p) { return "output of " + p.agent + agents::path_text(p.path); };
  for (const agents::AgentSpec& a : spec.agents) {
    try {
      (void)agents::join_pieces(agents::render_template(a.prompt, vars));
    } catch (const std::invalid_argument&) {
    }
  }
  for (const agents::Stage& s : spec.stages) (void)agents::stage_agents(s);
  return 0;
}

}  // namespace spool::fuzz
