// What the C API's files share: the structs behind the opaque handles, the
// registry that tells a live handle from a NULL, freed or foreign pointer,
// and call_api(), the one boundary where C++ exceptions become spool_status
// codes and the thread's last-error message.
#pragma once

#include <atomic>
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "model/model.h"
#include "runtime/engine.h"
#include "text/chat_template.h"
#include "text/tokenizer.h"
#include "spool.h"

namespace spool::server {
class ApiServer;
}

struct spool_tokenizer {
  const spool::Tokenizer* tok = nullptr;
  std::unique_ptr<spool::Tokenizer> owned;  // null when the model owns the tokenizer
  std::string template_source, bos_text, eos_text;
  mutable std::mutex template_mu;
  mutable std::unique_ptr<spool::ChatTemplate> chat_template;  // parsed on first use
};

struct spool_model {
  std::unique_ptr<spool::Model> model;
  spool_tokenizer tokenizer;  // borrowed view of model->tokenizer()
  std::mutex run_mu;          // one generate / logits at a time
  std::atomic<int> n_engines{0};
};

// The text of a request submitted without a callback, waiting for spool_engine_poll.
struct PolledRequest {
  std::string text;
  bool finished = false;
  spool::FinishReason reason = spool::FinishReason::None;
  std::string error;
  int prompt_tokens = 0, completion_tokens = 0;
};

struct spool_engine {
  spool_model* model = nullptr;
  std::unique_ptr<spool::Engine> engine;
  std::mutex mu;
  std::condition_variable cv;
  std::map<spool::RequestId, std::shared_ptr<PolledRequest>> polled;  // guarded by mu
  spool::RequestId max_id = 0;  // ids given out so far are <= this (engine ids increase)
  std::atomic<int> n_servers{0};
};

struct spool_server {
  spool_engine* engine = nullptr;
  std::unique_ptr<spool::server::ApiServer> api;
  std::thread thread;
  std::atomic<bool> done{false};  // listen() has returned
  int port = 0;
};

namespace spool::capi {

enum class Kind { Tokenizer, Model, Engine, Server };

// Live handles: added when created, removed when freed.
void register_handle(const void* p, Kind kind);
void unregister_handle(const void* p);
bool is_live(const void* p, Kind kind);

// Thrown inside call_api bodies: returned as `status` with `what` as the message.
struct ApiError {
  spool_status status;
  std::string what;
};
[[noreturn]] void fail(spool_status status, const std::string& what);

// Throws ApiError(INVALID_ARGUMENT) unless p is a live handle of this kind.
template <typename T>
T* checked(T* p, Kind kind, const char* what) {
  if (!p) fail(SPOOL_ERR_INVALID_ARGUMENT, std::string(what) + " is NULL");
  if (!is_live(p, kind)) fail(SPOOL_ERR_INVALID_ARGUMENT, std::string(what) + " is not a live handle (freed, or not one)");
  return p;
}
void require(const void* p, const char* what);  // INVALID_ARGUMENT when p is NULL

// Runs body; spool::Error becomes `error_status`, other failures their own
// codes; sets the thread's last-error message on failure.
spool_status call_api(spool_status error_status, const std::function<void()>& body);

// Writes `s` into a caller buffer (NUL when room); BUFFER_TOO_SMALL when it does not fit.
void write_text(const std::string& s, char* out, size_t capacity, size_t* n_bytes);

// Fills the tokenizer view's chat-template fields from a file's metadata.
void init_tokenizer_view(spool_tokenizer& view, const spool::Tokenizer& tok, const spool::gguf::File& file);

// The sampling / stop fields of params, checked (INVALID_ARGUMENT naming the field).
spool::RequestParams request_params(const spool_generate_params* params);
// Tokenizes a prompt as spool run does (BOS when the model wants one, special tokens parsed).
std::vector<int32_t> prompt_tokens(const spool::Model& model, const char* prompt);
spool_finish_reason finish_reason_of(spool::FinishReason r);

}  // namespace spool::capi
