// OpenAI request parsing and validation; see openai_request.h.
#include "server/openai_request.h"

#include <cmath>
#include <nlohmann/json.hpp>

#include "server/api_error.h"

namespace spool::server {

using nlohmann::json;

namespace {

constexpr int kMaxTopLogprobs = 20;
constexpr int kMaxStopStrings = 16;
constexpr size_t kMaxLogitBias = 1024;  // entries; OpenAI's own limit is of this order

// The field, or null when it is absent or JSON null (OpenAI treats both as "not given").
const json* field(const json& body, const char* name) {
  const auto it = body.find(name);
  return it == body.end() || it->is_null() ? nullptr : &*it;
}

std::optional<double> number_field(const json& body, const char* name, double lo, double hi) {
  const json* v = field(body, name);
  if (!v) return std::nullopt;
  if (!v->is_number())
    throw bad_param(name, std::string("'") + name + "' must be a number", "invalid_type");
  const double x = v->get<double>();
  if (!std::isfinite(x) || x < lo || x > hi)
    throw bad_param(name, std::string("'") + name + "' must be between " + json(lo).dump() + " and " +
                              json(hi).dump() + ", got " + v->dump());
  return x;
}

// Integers; a float with an integral value (16.0) is accepted as JavaScript clients may send it.
std::optional<int64_t> int_field(const json& body, const char* name, int64_t lo, int64_t hi) {
  const json* v = field(body, name);
  if (!v) return std::nullopt;
  const bool integral = v->is_number_integer() ||
                        (v->is_number_float() && std::isfinite(v->get<double>()) &&
                         v->get<double>() == std::floor(v->get<double>()) && std::fabs(v->get<double>()) < 9e18);
  if (!integral) throw bad_param(name, std::string("'") + name + "' must be an integer", "invalid_type");
  const int64_t x = v->is_number_unsigned() && v->get<uint64_t>() > (uint64_t)INT64_MAX ? INT64_MAX
                    : v->is_number_float()                                               ? (int64_t)v->get<double>()
                                                                                         : v->get<int64_t>();
  if (x < lo || x > hi)
    throw bad_param(name, std::string("'") + name + "' must be between " + std::to_string(lo) + " and " +
                              std::to_string(hi) + ", got " + v->dump());
  return x;
}

std::optional<bool> bool_field(const json& body, const char* name) {
  const json* v = field(body, name);
  if (!v) return std::nullopt;
  if (!v->is_boolean()) throw bad_param(name, std::string("'") + name + "' must be a boolean", "invalid_type");
  return v->get<bool>();
}

std::vector<std::string> parse_stop(const json& body) {
  const json* v = field(body, "stop");
  if (!v) return {};
  const char* type_msg = "'stop' must be a string or an array of strings";
  std::vector<std::string> out;
  if (v->is_string()) {
    out.push_back(v->get<std::string>());
  } else if (v->is_array()) {
    if (v->size() > (size_t)kMaxStopStrings)
      throw bad_param("stop", "'stop' has " + std::to_string(v->size()) + " strings; at most " +
                                  std::to_string(kMaxStopStrings) + " are allowed");
    for (const json& s : *v) {
      if (!s.is_string()) throw bad_param("stop", type_msg, "invalid_type");
      out.push_back(s.get<std::string>());
    }
  } else {
    throw bad_param("stop", type_msg, "invalid_type");
  }
  for (const std::string& s : out)
    if (s.empty()) throw bad_param("stop", "'stop' strings must not be empty");
  return out;
}

std::vector<int32_t> token_array(const json& arr, const char* param) {
  std::vector<int32_t> ids;
  for (const json& t : arr) {
    if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() > INT32_MAX)
      throw bad_param(param, std::string("'") + param + "' token ids must be non-negative integers", "invalid_type");
    ids.push_back((int32_t)t.get<int64_t>());
  }
  return ids;
}

// prompt: a string, an array of token ids, or a one-element array of either.
void parse_prompt(const json& body, ApiRequest& r) {
  const json* v = field(body, "prompt");
  const char* type_msg = "'prompt' must be a string or an array of token ids";
  if (!v) throw bad_param("prompt", "'prompt' is required", "missing_required_parameter");
  const json* p = v;
  if (v->is_array() && v->size() == 1 && ((*v)[0].is_string() || (*v)[0].is_array())) p = &(*v)[0];
  else if (v->is_array() && !v->empty() && ((*v)[0].is_string() || (*v)[0].is_array()))
    throw bad_param("prompt", "only one prompt per request is supported (got " + std::to_string(v->size()) + ")");
  if (p->is_string()) {
    r.prompt_text = p->get<std::string>();
  } else if (p->is_array()) {
    if (p->empty()) throw bad_param("prompt", "'prompt' is empty");
    r.prompt_ids = token_array(*p, "prompt");
  } else {
    throw bad_param("prompt", type_msg, "invalid_type");
  }
}

// content: a string, null, or an array of {"type": "text", "text": ...} parts.
std::string message_content(const json& m, size_t i) {
  const std::string param = "messages[" + std::to_string(i) + "].content";
  const auto it = m.find("content");
  if (it == m.end() || it->is_null()) return "";
  if (it->is_string()) return it->get<std::string>();
  if (!it->is_array()) throw bad_param(param, "'" + param + "' must be a string or an array of parts", "invalid_type");
  std::string text;
  for (const json& part : *it) {
    if (!part.is_object() || part.value("type", "") != "text" || !part.contains("text") || !part["text"].is_string())
      throw bad_param(param, "'" + param + "' parts must be {\"type\": \"text\", \"text\": string}; other content "
                             "types are not supported");
    text += part["text"].get<std::string>();
  }
  return text;
}

// OpenAI's roles; "function" is the deprecated form of "tool" (legacy function calling).
bool known_role(const std::string& role) {
  for (const char* k : {"system", "developer", "user", "assistant", "tool", "function"})
    if (role == k) return true;
  return false;
}

void parse_messages(const json& body, ApiRequest& r) {
  const json* v = field(body, "messages");
  if (!v) throw bad_param("messages", "'messages' is required", "missing_required_parameter");
  if (!v->is_array()) throw bad_param("messages", "'messages' must be an array", "invalid_type");
  if (v->empty()) throw bad_param("messages", "'messages' must contain at least one message");
  for (size_t i = 0; i < v->size(); ++i) {
    const json& m = (*v)[i];
    const std::string param = "messages[" + std::to_string(i) + "]";
    if (!m.is_object()) throw bad_param(param, "'" + param + "' must be an object", "invalid_type");
    const auto role = m.find("role");
    if (role == m.end() || !role->is_string() || role->get<std::string>().empty())
      throw bad_param(param + ".role", "'" + param + ".role' must be a non-empty string", "invalid_type");
    if (!known_role(role->get<std::string>()))
      throw bad_param(param + ".role", "'" + param + ".role' must be one of 'system', 'developer', 'user', "
                                       "'assistant', 'tool' or 'function', got " + role->dump().substr(0, 40));
    r.messages.push_back({role->get<std::string>(), message_content(m, i)});
  }
}

// logit_bias: {"<token id>": bias in [-100, 100]}, as OpenAI's. The ids are
// checked against the vocabulary in to_request_params, which knows it.
void parse_logit_bias(const json& body, SamplingParams& s) {
  const json* v = field(body, "logit_bias");
  if (!v) return;
  if (!v->is_object())
    throw bad_param("logit_bias", "'logit_bias' must be an object mapping token ids to biases", "invalid_type");
  if (v->size() > kMaxLogitBias)
    throw bad_param("logit_bias", "'logit_bias' has " + std::to_string(v->size()) + " entries; at most " +
                                      std::to_string(kMaxLogitBias) + " are allowed");
  for (const auto& [key, value] : v->items()) {
    const std::string shown = "'" + key.substr(0, 24) + (key.size() > 24 ? "...'" : "'");
    bool digits = !key.empty() && key.size() <= 9;
    for (char c : key) digits &= c >= '0' && c <= '9';
    if (!digits) throw bad_param("logit_bias", "'logit_bias' keys must be token ids (decimal integers), got " + shown);
    if (!value.is_number())
      throw bad_param("logit_bias", "'logit_bias' values must be numbers, got " + value.dump().substr(0, 40) +
                                        " for token " + key, "invalid_type");
    const double bias = value.get<double>();
    if (!std::isfinite(bias) || bias < -100 || bias > 100)
      throw bad_param("logit_bias", "'logit_bias' values must be between -100 and 100, got " + value.dump() +
                                        " for token " + key);
    s.logit_bias.emplace_back(std::stoi(key), (float)bias);
  }
}

void parse_logprobs(const json& body, ApiRequest& r) {
  if (r.endpoint == Endpoint::Completions) {
    if (auto n = int_field(body, "logprobs", 0, kMaxTopLogprobs)) r.top_logprobs = (int)*n;
    return;
  }
  const bool on = bool_field(body, "logprobs").value_or(false);
  const auto top = int_field(body, "top_logprobs", 0, kMaxTopLogprobs);
  if (top && !on) throw bad_param("top_logprobs", "'top_logprobs' needs 'logprobs': true");
  if (on) r.top_logprobs = (int)top.value_or(0);
}

void check_logit_bias(const SamplingParams& s, int n_vocab) {
  size_t n_banned = 0;
  for (const auto& [id, bias] : s.logit_bias) {
    if (id >= n_vocab)
      throw bad_param("logit_bias", "'logit_bias' token id " + std::to_string(id) +
                                        " is out of range (vocabulary has " + std::to_string(n_vocab) + " tokens)");
    n_banned += bias <= kBanBias;
  }
  if (n_vocab > 0 && n_banned >= (size_t)n_vocab)  // keys are distinct, so this is every token
    throw bad_param("logit_bias", "'logit_bias' bans every token of the vocabulary");
}

}  // namespace

ApiRequest parse_api_request(const json& body, Endpoint endpoint, const nlohmann::ordered_json* ordered) {
  ApiRequest r;
  r.endpoint = endpoint;
  if (const json* m = field(body, "model")) {
    if (!m->is_string()) throw bad_param("model", "'model' must be a string", "invalid_type");
    r.model = m->get<std::string>();
  }
  if (endpoint == Endpoint::Completions) parse_prompt(body, r);
  else parse_messages(body, r);

  r.stream = bool_field(body, "stream").value_or(false);
  if (const json* so = field(body, "stream_options")) {
    if (!so->is_object()) throw bad_param("stream_options", "'stream_options' must be an object", "invalid_type");
    r.include_usage = bool_field(*so, "include_usage").value_or(false);
  }
  if (auto n = int_field(body, "n", 1, 1 << 30); n && *n != 1)
    throw bad_param("n", "only n=1 is supported (got " + std::to_string(*n) + ")");
  if (auto n = int_field(body, "best_of", 1, 1 << 30); n && *n != 1)
    throw bad_param("best_of", "only best_of=1 is supported");
  if (bool_field(body, "echo").value_or(false)) throw bad_param("echo", "'echo' is not supported");

  auto max_tokens = int_field(body, "max_completion_tokens", 1, INT32_MAX);
  if (!max_tokens) max_tokens = int_field(body, "max_tokens", 1, INT32_MAX);
  if (max_tokens) r.max_tokens = (int)*max_tokens;

  // OpenAI's defaults (temperature 1, top_p 1, no top-k/min-p); top_k, min_p and
  // repeat_penalty are extensions, as in llama-server.
  SamplingParams& s = r.sampling;
  s.temperature = (float)number_field(body, "temperature", 0, 2).value_or(1.0);
  s.top_p = (float)number_field(body, "top_p", 0, 1).value_or(1.0);
  s.top_k = (int)int_field(body, "top_k", 0, 1 << 30).value_or(0);
  s.min_p = (float)number_field(body, "min_p", 0, 1).value_or(0.0);
  s.repeat_penalty = (float)number_field(body, "repeat_penalty", 0, 10).value_or(1.0);
  s.frequency_penalty = (float)number_field(body, "frequency_penalty", -2, 2).value_or(0.0);
  s.presence_penalty = (float)number_field(body, "presence_penalty", -2, 2).value_or(0.0);
  if (auto seed = int_field(body, "seed", INT64_MIN, INT64_MAX); seed && *seed >= 0) s.seed = (uint64_t)*seed;
  parse_logit_bias(body, s);

  r.stop = parse_stop(body);
  r.ignore_eos = bool_field(body, "ignore_eos").value_or(false);
  parse_logprobs(body, r);
  const nlohmann::ordered_json kept = ordered ? nlohmann::ordered_json() : nlohmann::ordered_json::parse(body.dump());
  r.structured = parse_structured(ordered ? *ordered : kept, endpoint == Endpoint::ChatCompletions);
  return r;
}

RequestParams to_request_params(const ApiRequest& r, const PromptContext& ctx) {
  const Tokenizer& tok = *ctx.tokenizer;
  RequestParams p;
  // The grammar first: a bad schema is reported whatever else is wrong.
  const bool constrained = r.structured.tools_active() || r.structured.format != StructuredRequest::Format::Text;
  if (constrained && !ctx.grammars)
    throw bad_param("response_format", "structured output is not available on this route");
  if (constrained) p.grammar = request_grammar(r.structured, *ctx.grammars, tool_call_style(ctx.chat_template, r.structured));
  if (r.endpoint == Endpoint::ChatCompletions) {
    if (!ctx.chat_template)
      throw ApiError(400, "the model has no chat template; use /v1/completions", "invalid_request_error",
                     "no_chat_template", "messages");
    try {
      const TemplateInput in = template_input(r.structured, *ctx.chat_template, tool_call_style(ctx.chat_template, r.structured));
      p.prompt = chat_prompt_tokens(jinja::Value::from_json(in.messages), tok, *ctx.chat_template,
                                    jinja::Value::from_json(in.extra));
    } catch (const ApiError&) {
      throw;
    } catch (const std::exception& e) {
      throw bad_param("messages", std::string("the chat template failed on these messages: ") + e.what());
    }
  } else if (r.prompt_text) {
    p.prompt = tok.encode(*r.prompt_text, true, true);
  } else {
    for (int32_t id : r.prompt_ids)
      if (id >= tok.n_vocab())
        throw bad_param("prompt", "token id " + std::to_string(id) + " is out of range (vocabulary has " +
                                      std::to_string(tok.n_vocab()) + " tokens)");
    p.prompt = r.prompt_ids;
  }
  const std::string param = r.endpoint == Endpoint::ChatCompletions ? "messages" : "prompt";
  if (p.prompt.empty()) throw bad_param(param, "the prompt is empty");
  const int n_prompt = (int)p.prompt.size();
  if (n_prompt + 1 > ctx.n_ctx)
    throw ApiError(400,
                   "the prompt has " + std::to_string(n_prompt) + " tokens but the context holds " +
                       std::to_string(ctx.n_ctx) + " (with at least one generated token); shorten it or restart "
                       "the server with a larger -c",
                   "invalid_request_error", "context_length_exceeded", param);
  const int room = ctx.n_ctx - n_prompt;
  p.max_tokens = std::min(r.max_tokens.value_or(r.endpoint == Endpoint::Completions ? 16 : room), room);
  p.sampling = r.sampling;
  check_logit_bias(r.sampling, tok.n_vocab());
  p.stop = r.stop;
  p.ignore_eos = r.ignore_eos;
  p.top_logprobs = r.top_logprobs;
  return p;
}

}  // namespace spool::server
