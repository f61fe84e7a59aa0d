// The OpenAI Batch API's executor: a batch is a JSONL file of /v1/completions
// or /v1/chat/completions requests (each with a custom_id). It is validated
// when created, stored in the RunStore (kind "batch"), and run by one worker
// in creation order: its requests go to the engine as ordinary requests, up
// to --parallel at once, so they decode together. Each finished request is
// stored at once, so after a crash a batch resumes where it was (requests
// that finished are not run again). At the end the output and error files are
// written as OpenAI lays them out ({"id", "custom_id", "response": {"status_code",
// "request_id", "body"}, "error"}).
#pragma once

#include <condition_variable>
#include <deque>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <thread>

#include "agents/pipeline_runner.h"
#include "agents/run_store.h"
#include "runtime/engine.h"
#include "server/api_error.h"
#include "server/http_server.h"

namespace httplib {
struct Response;
}

namespace spool::server {

class BatchRunner {
 public:
  BatchRunner(ApiServer::Context& ctx, agents::RunStore& store);
  ~BatchRunner();
  BatchRunner(const BatchRunner&) = delete;
  BatchRunner& operator=(const BatchRunner&) = delete;

  // Requeues batches a crash left unfinished, starts the worker.
  void start();
  void shutdown();

  // Validates the input file against the endpoint (throws ApiError naming the
  // line), stores the batch and queues it; returns the batch object. Throws
  // agents::LimitExceeded when the queue or the store is full.
  nlohmann::json create(const std::string& input_file_id, const std::string& endpoint,
                        const std::string& completion_window, const nlohmann::json& metadata);
  std::optional<nlohmann::json> get(const std::string& id);
  nlohmann::json list(int limit, const std::string& after);
  std::optional<nlohmann::json> cancel(const std::string& id);
  // DELETE /v1/batches/{id}: an ended batch with its output and error files;
  // nullopt for an unknown id; throws ApiError 409 while it has not ended.
  std::optional<nlohmann::json> remove(const std::string& id);
  // The id of a batch not yet ended that reads this file ("" : none).
  std::string input_of_unfinished(const std::string& file_id);

 private:
  void worker();
  void execute(const std::string& id);
  nlohmann::json batch_json(const agents::RunRecord& r);

  ApiServer::Context& ctx_;
  agents::RunStore& store_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::string> queue_;
  std::set<std::string> cancelling_;
  bool stopping_ = false;
  std::thread worker_;
};

// Answers a LimitExceeded of the admission caps: 429 for the queue
// (--max-queued-runs), 507 for the store (--max-storage, with
// x-should-retry: false, which the openai clients honour).
[[noreturn]] void throw_limit_error(const agents::LimitExceeded& e, httplib::Response& res);

}  // namespace spool::server
