// C API: one sequence on a model: spool_generate (sample with a per-token
// callback and a cancel flag, as `spool run` does) and spool_logits; plus the
// request parameters that the engine's submit shares.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "capi/capi_internal.h"
#include "core/error.h"
#include "runtime/sampler.h"
#include "runtime/session.h"
#include "text/text_stream.h"

using namespace spool;
using namespace spool::capi;

namespace spool::capi {

RequestParams request_params(const spool_generate_params* p) {
  RequestParams r;
  if (!p) return r;
  if (p->struct_size != sizeof(spool_generate_params))
    fail(SPOOL_ERR_INVALID_ARGUMENT, "spool_generate_params.struct_size is " + std::to_string(p->struct_size) +
                                         ", expected " + std::to_string(sizeof(spool_generate_params)) +
                                         " (fill the struct with spool_generate_params_init)");
  if (p->max_tokens < 0) fail(SPOOL_ERR_INVALID_ARGUMENT, "max_tokens must not be negative");
  if (!(p->temperature >= 0) || std::isinf(p->temperature))
    fail(SPOOL_ERR_INVALID_ARGUMENT, "temperature must be a finite number >= 0");
  if (!(p->top_p > 0)) fail(SPOOL_ERR_INVALID_ARGUMENT, "top_p must be positive");
  if (!(p->min_p >= 0) || p->min_p > 1) fail(SPOOL_ERR_INVALID_ARGUMENT, "min_p must be between 0 and 1");
  if (!(p->repeat_penalty > 0)) fail(SPOOL_ERR_INVALID_ARGUMENT, "repeat_penalty must be positive");
  if (p->n_ctx < 0) fail(SPOOL_ERR_INVALID_ARGUMENT, "n_ctx must not be negative");
  if (p->n_stop > 0 && !p->stop) fail(SPOOL_ERR_INVALID_ARGUMENT, "stop is NULL but n_stop is not 0");
  r.max_tokens = p->max_tokens;
  r.sampling.temperature = p->temperature;
  r.sampling.top_k = p->top_k;
  r.sampling.top_p = p->top_p;
  r.sampling.min_p = p->min_p;
  r.sampling.repeat_penalty = p->repeat_penalty;
  r.sampling.seed = p->seed;
  r.ignore_eos = p->ignore_eos != 0;
  for (size_t i = 0; i < p->n_stop; ++i) {
    if (!p->stop[i]) fail(SPOOL_ERR_INVALID_ARGUMENT, "stop[" + std::to_string(i) + "] is NULL");
    if (p->stop[i][0]) r.stop.push_back(p->stop[i]);
  }
  return r;
}

std::vector<int32_t> prompt_tokens(const Model& model, const char* prompt) {
  require(prompt, "prompt");
  std::vector<int32_t> ids = model.tokenizer().encode(prompt, true, true);
  if (ids.empty()) fail(SPOOL_ERR_INVALID_ARGUMENT, "the prompt is empty");
  return ids;
}

}  // namespace spool::capi

namespace {

int context_of(const Model& model, int asked) {
  const int train = model.config().n_ctx_train;
  return asked > 0 ? asked : std::min(train > 0 ? train : 4096, 4096);
}

bool cancelled(const volatile int* flag) { return flag && __atomic_load_n(flag, __ATOMIC_RELAXED) != 0; }

}  // namespace

extern "C" {

void spool_generate_params_init(spool_generate_params* params) {
  if (!params) return;
  std::memset(params, 0, sizeof *params);
  params->struct_size = sizeof *params;
  const RequestParams d;
  params->max_tokens = d.max_tokens;
  params->temperature = d.sampling.temperature;
  params->top_k = d.sampling.top_k;
  params->top_p = d.sampling.top_p;
  params->min_p = d.sampling.min_p;
  params->repeat_penalty = d.sampling.repeat_penalty;
  params->seed = d.sampling.seed;
}

spool_status spool_generate(spool_model* model, const char* prompt, const spool_generate_params* params,
                            spool_token_callback on_token, void* user_data, const volatile int* cancel,
                            spool_generate_result* result) {
  return call_api(SPOOL_ERR_RUNTIME, [&] {
    checked(model, Kind::Model, "model");
    const RequestParams req = request_params(params);
    const int n_ctx = context_of(*model->model, params ? params->n_ctx : 0);
    if (result) *result = {};
    std::lock_guard<std::mutex> lock(model->run_mu);
    if (model->n_engines > 0) fail(SPOOL_ERR_BUSY, "the model is used by an engine: submit requests to the engine");
    Model& m = *model->model;
    const Tokenizer& tok = m.tokenizer();
    const std::vector<int32_t> prompt_ids = prompt_tokens(m, prompt);
    if ((int)prompt_ids.size() >= n_ctx)
      fail(SPOOL_ERR_INVALID_ARGUMENT, "the prompt has " + std::to_string(prompt_ids.size()) +
                                           " tokens, the context is " + std::to_string(n_ctx));
    Session session(m, n_ctx, m.n_batch());
    Sampler sampler(req.sampling, m.config().n_vocab);
    for (int32_t id : prompt_ids) sampler.accept(id);
    TextStream stream(req.stop);
    spool_finish_reason reason = SPOOL_FINISH_LENGTH;
    int n_generated = 0;
    const float* logits = session.feed(prompt_ids).data();
    while (n_generated < req.max_tokens) {
      if (cancelled(cancel)) {
        reason = SPOOL_FINISH_CANCELLED;
        break;
      }
      const int32_t next = sampler.sample(logits);
      if (!req.ignore_eos && tok.is_eog(next)) {
        reason = SPOOL_FINISH_STOP;
        break;
      }
      ++n_generated;
      sampler.accept(next);
      const std::string text = stream.push(tok.token_to_piece(next));
      if (on_token && on_token(next, text.c_str(), text.size(), user_data) != 0) {
        reason = SPOOL_FINISH_CANCELLED;
        break;
      }
      if (stream.stopped()) {
        reason = SPOOL_FINISH_STOP;
        break;
      }
      if (session.n_past() >= n_ctx) break;
      logits = session.feed({next}).data();
    }
    const std::string rest = stream.stopped() ? std::string() : stream.flush();
    if (!rest.empty() && on_token && reason != SPOOL_FINISH_CANCELLED) on_token(-1, rest.c_str(), rest.size(), user_data);
    if (result) *result = {(int32_t)prompt_ids.size(), n_generated, reason};
  });
}

spool_status spool_logits(spool_model* model, const int32_t* ids, size_t n_ids, int all_positions, float* logits,
                          size_t capacity, size_t* n_floats) {
  return call_api(SPOOL_ERR_RUNTIME, [&] {
    checked(model, Kind::Model, "model");
    require(n_floats, "n_floats");
    if (n_ids == 0) fail(SPOOL_ERR_INVALID_ARGUMENT, "no token ids");
    require(ids, "ids");
    if (capacity > 0) require(logits, "logits");
    Model& m = *model->model;
    const int n_vocab = m.config().n_vocab;
    for (size_t i = 0; i < n_ids; ++i)
      if (ids[i] < 0 || ids[i] >= n_vocab)
        fail(SPOOL_ERR_INVALID_ARGUMENT, "token id " + std::to_string(ids[i]) + " (at " + std::to_string(i) +
                                             ") is out of range (vocab " + std::to_string(n_vocab) + ")");
    const size_t need = (all_positions ? n_ids : 1) * (size_t)n_vocab;
    *n_floats = need;
    if (need > capacity)
      fail(SPOOL_ERR_BUFFER_TOO_SMALL, "the logits need " + std::to_string(need) + " floats, the buffer holds " +
                                           std::to_string(capacity));
    std::lock_guard<std::mutex> lock(model->run_mu);
    if (model->n_engines > 0) fail(SPOOL_ERR_BUSY, "the model is used by an engine");
    Session session(m, (int)n_ids, m.n_batch());
    const std::vector<float>& out = session.feed(std::vector<int32_t>(ids, ids + n_ids), all_positions != 0);
    std::memcpy(logits, out.data(), need * sizeof(float));
  });
}

}  // extern "C"
