// The OpenAI Files and Batch routes (the subset a batch needs), driven
// unmodified by the official clients:
//   POST /v1/files (multipart: file, purpose=batch)   GET /v1/files/{id}   GET /v1/files/{id}/content
//   GET /v1/files (?purpose, ?limit, ?after, ?order)   DELETE /v1/files/{id}
//   POST /v1/batches {input_file_id, endpoint, completion_window, metadata}
//   GET /v1/batches/{id}   GET /v1/batches (?limit, ?after)   POST /v1/batches/{id}/cancel   DELETE /v1/batches/{id}
// Stored in the server's data dir (uploads capped by --max-storage); executed by BatchRunner.
#include <nlohmann/json.hpp>

#include "server/batch_runner.h"
#include "server/openai_format.h"
#include "server/server_context.h"

namespace spool::server {

namespace {

void reply(httplib::Response& res, const json& j) { res.set_content(dump_json(j), "application/json"); }

BatchRunner& batches_of(ServerContext& ctx) {
  if (!ctx.batches) throw ApiError(404, "batches are not enabled on this server", "invalid_request_error", "not_found");
  return *ctx.batches;
}

json file_json(const agents::FileRecord& f) {
  return json{{"id", f.id},           {"object", "file"},         {"bytes", f.bytes}, {"created_at", (int64_t)f.created_at},
              {"filename", f.filename}, {"purpose", f.purpose}, {"status", "processed"}, {"status_details", nullptr}};
}

void upload_file(ServerContext& ctx, const httplib::Request& req, httplib::Response& res) {
  batches_of(ctx);
  if (!req.is_multipart_form_data())
    throw ApiError(400, "upload the file as multipart/form-data with fields 'file' and 'purpose'",
                   "invalid_request_error", "invalid_request", "file");
  if (!req.has_file("file")) throw bad_param("file", "the 'file' field is missing", "missing_required_parameter");
  if (!req.has_file("purpose")) throw bad_param("purpose", "the 'purpose' field is missing", "missing_required_parameter");
  const httplib::MultipartFormData file = req.get_file_value("file");
  const std::string purpose = req.get_file_value("purpose").content;
  if (purpose != "batch") throw bad_param("purpose", "this server stores files with purpose 'batch' only");
  agents::FileRecord f;
  f.id = agents::new_run_id("file-");
  f.filename = file.filename.empty() ? "upload.jsonl" : file.filename;
  f.purpose = purpose;
  try {
    ctx.runner->check_storage(file.content.size());
  } catch (const agents::LimitExceeded& e) {
    throw_limit_error(e, res);
  }
  ctx.runner->store().put_file(f, file.content);
  reply(res, file_json(*ctx.runner->store().get_file(f.id)));
}

agents::FileRecord find_file(ServerContext& ctx, const std::string& id) {
  batches_of(ctx);
  const std::optional<agents::FileRecord> f = ctx.runner->store().get_file(id);
  if (!f) throw ApiError(404, "no file '" + id + "'", "invalid_request_error", "not_found", "file_id");
  return *f;
}

ApiError no_batch(const std::string& id) {
  return ApiError(404, "no batch '" + id + "'", "invalid_request_error", "not_found", "batch_id");
}

// GET /v1/files as OpenAI pages it: newest first unless ?order=asc, ?limit (default and most 10000), ?after=ID.
void list_files(ServerContext& ctx, const httplib::Request& req, httplib::Response& res) {
  batches_of(ctx);
  const int limit = limit_param(req, 10000, 10000);
  const std::string order = req.has_param("order") ? req.get_param_value("order") : "desc";
  if (order != "asc" && order != "desc") throw bad_param("order", "order must be 'asc' or 'desc'");
  const std::string purpose = req.has_param("purpose") ? req.get_param_value("purpose") : "";
  bool more = false;
  const std::vector<agents::FileRecord> files = ctx.runner->store().list_files(
      purpose, limit, req.has_param("after") ? req.get_param_value("after") : "", order == "asc", more);
  json data = json::array();
  for (const agents::FileRecord& f : files) data.push_back(file_json(f));
  reply(res, json{{"object", "list"},
                  {"data", data},
                  {"first_id", files.empty() ? json(nullptr) : json(files.front().id)},
                  {"last_id", files.empty() ? json(nullptr) : json(files.back().id)},
                  {"has_more", more}});
}

// DELETE /v1/files/{id}: the file and its content; refused (409) while a batch that has not ended reads it.
void delete_file(ServerContext& ctx, const httplib::Request& req, httplib::Response& res) {
  const agents::FileRecord f = find_file(ctx, req.matches[1].str());
  if (const std::string batch = batches_of(ctx).input_of_unfinished(f.id); !batch.empty())
    throw ApiError(409, "file " + f.id + " is the input of batch " + batch + ", which has not ended: cancel the batch "
                   "or wait for it to end, then delete the file", "invalid_request_error", "file_in_use", "file_id");
  if (!ctx.runner->store().delete_file(f.id)) throw ApiError(404, "no file '" + f.id + "'", "invalid_request_error", "not_found", "file_id");
  reply(res, json{{"id", f.id}, {"object", "file"}, {"deleted", true}});
}

}  // namespace

void add_batch_routes(ServerContext& ctx) {
  GuardedHttpServer& http = ctx.http;  // its Post/Put read bodies within --max-body
  http.Post("/v1/files", guarded(ctx, upload_file));
  http.Get("/v1/files", guarded(ctx, list_files));
  http.Delete(R"(/v1/files/([A-Za-z0-9_-]+))", guarded(ctx, delete_file));
  http.Get(R"(/v1/files/([A-Za-z0-9_-]+))", guarded(ctx, [](ServerContext& c, const httplib::Request& req, httplib::Response& res) {
    reply(res, file_json(find_file(c, req.matches[1].str())));
  }));
  http.Get(R"(/v1/files/([A-Za-z0-9_-]+)/content)", guarded(ctx, [](ServerContext& c, const httplib::Request& req, httplib::Response& res) {
    const agents::FileRecord f = find_file(c, req.matches[1].str());
    res.set_content(*c.runner->store().file_content(f.id), "application/octet-stream");
  }));
  http.Post("/v1/batches", guarded(ctx, [](ServerContext& c, const httplib::Request& req, httplib::Response& res) {
    BatchRunner& b = batches_of(c);
    const json body = parse_json_body(req);
    const auto str = [&](const char* key, bool required, const std::string& def) {
      const auto it = body.find(key);
      if (it == body.end() || it->is_null()) {
        if (required) throw bad_param(key, std::string("'") + key + "' is required", "missing_required_parameter");
        return def;
      }
      if (!it->is_string()) throw bad_param(key, std::string("'") + key + "' must be a string", "invalid_type");
      return it->get<std::string>();
    };
    json metadata = body.contains("metadata") ? body["metadata"] : json(nullptr);
    if (!metadata.is_null() && !metadata.is_object()) throw bad_param("metadata", "'metadata' must be an object", "invalid_type");
    try {
      reply(res, b.create(str("input_file_id", true, ""), str("endpoint", true, ""),
                          str("completion_window", false, "24h"), metadata));
    } catch (const agents::LimitExceeded& e) {
      throw_limit_error(e, res);
    }
  }));
  http.Get("/v1/batches", guarded(ctx, [](ServerContext& c, const httplib::Request& req, httplib::Response& res) {
    const int limit = limit_param(req, 20, 100);
    reply(res, batches_of(c).list(limit, req.has_param("after") ? req.get_param_value("after") : ""));
  }));
  http.Get(R"(/v1/batches/([A-Za-z0-9_]+))", guarded(ctx, [](ServerContext& c, const httplib::Request& req, httplib::Response& res) {
    const std::optional<json> b = batches_of(c).get(req.matches[1].str());
    if (!b) throw no_batch(req.matches[1].str());
    reply(res, *b);
  }));
  http.Delete(R"(/v1/batches/([A-Za-z0-9_]+))", guarded(ctx, [](ServerContext& c, const httplib::Request& req, httplib::Response& res) {
    const std::optional<json> b = batches_of(c).remove(req.matches[1].str());
    if (!b) throw no_batch(req.matches[1].str());
    reply(res, *b);
  }));
  http.Post(R"(/v1/batches/([A-Za-z0-9_]+)/cancel)", guarded(ctx, [](ServerContext& c, const httplib::Request& req, httplib::Response& res) {
    const std::optional<json> b = batches_of(c).cancel(req.matches[1].str());
    if (!b) throw no_batch(req.matches[1].str());
    reply(res, *b);
  }));
}

}  // namespace spool::server
