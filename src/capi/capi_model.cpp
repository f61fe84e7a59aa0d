// C API: models: open with the CLI's load options, info, stats, and the
// model's tokenizer (include/spool.h). Generation and logits: capi_generate.cpp.
#include <cstring>

#include "capi/capi_internal.h"
#include "core/byte_size.h"
#include "core/error.h"
#include "core/thread_pool.h"
#include "weights/convert.h"

using namespace spool;
using namespace spool::capi;

namespace {

LoadOptions load_options(const spool_model_options* o) {
  LoadOptions opt;
  if (!o) return opt;
  if (o->struct_size != sizeof(spool_model_options))
    fail(SPOOL_ERR_INVALID_ARGUMENT, "spool_model_options.struct_size is " + std::to_string(o->struct_size) +
                                         ", expected " + std::to_string(sizeof(spool_model_options)) +
                                         " (fill the struct with spool_model_options_init)");
  if (o->n_threads < 0) fail(SPOOL_ERR_INVALID_ARGUMENT, "n_threads must not be negative");
  if (o->n_ctx < 0) fail(SPOOL_ERR_INVALID_ARGUMENT, "n_ctx must not be negative");
  opt.n_threads = o->n_threads;
  opt.n_ctx = o->n_ctx;
  try {
    if (o->mem_budget) opt.mem_budget = parse_memory_size(o->mem_budget);
  } catch (const Error& e) {
    fail(SPOOL_ERR_INVALID_ARGUMENT, std::string("mem_budget: ") + e.what());
  }
  if (o->kv_type) {
    const std::string t = o->kv_type;
    if (t == "f16" || t == "F16") opt.kv_type = DType::F16;
    else if (t != "f32" && t != "F32") fail(SPOOL_ERR_INVALID_ARGUMENT, "kv_type: expected f32 or f16, got '" + t + "'");
  }
  if (o->convert) {
    opt.convert = dtype_from_name(o->convert);
    if (!opt.convert) fail(SPOOL_ERR_INVALID_ARGUMENT, std::string("convert: unknown type '") + o->convert + "'");
    try {
      check_convert_target(*opt.convert);
    } catch (const Error& e) {
      fail(SPOOL_ERR_INVALID_ARGUMENT, std::string("convert: ") + e.what());
    }
  }
  if (o->cache_policy) {
    const std::string p = o->cache_policy;
    if (p != "lru" && p != "lfu" && p != "lru2")
      fail(SPOOL_ERR_INVALID_ARGUMENT, "cache_policy: expected lru, lfu or lru2, got '" + p + "'");
    opt.cache_policy = p;
  }
  opt.speculate = o->no_speculate == 0;
  return opt;
}

bool is_streaming(Model& m) { return std::strncmp(m.weights().mode(), "streaming", 9) == 0; }

void copy_name(char* dst, size_t cap, const std::string& s) {
  std::strncpy(dst, s.c_str(), cap - 1);
  dst[cap - 1] = 0;
}

}  // namespace

extern "C" {

void spool_model_options_init(spool_model_options* options) {
  if (!options) return;
  std::memset(options, 0, sizeof *options);
  options->struct_size = sizeof *options;
}

spool_status spool_model_open(const char* path, const spool_model_options* options, spool_model** out) {
  return call_api(SPOOL_ERR_LOAD, [&] {
    require(path, "path");
    require(out, "out");
    *out = nullptr;
    const LoadOptions opt = load_options(options);
    auto h = std::make_unique<spool_model>();
    h->model = load_model(path, opt);
    init_tokenizer_view(h->tokenizer, h->model->tokenizer(), h->model->file());
    register_handle(&h->tokenizer, Kind::Tokenizer);
    register_handle(h.get(), Kind::Model);
    *out = h.release();
  });
}

spool_status spool_model_free(spool_model* model) {
  return call_api(SPOOL_ERR_INTERNAL, [&] {
    checked(model, Kind::Model, "model");
    if (model->n_engines > 0) fail(SPOOL_ERR_BUSY, "the model still has an engine: free the engine first");
    { std::lock_guard<std::mutex> lock(model->run_mu); }  // no generate in flight
    unregister_handle(&model->tokenizer);
    unregister_handle(model);
    delete model;
  });
}

spool_status spool_model_get_info(const spool_model* model, spool_model_info* out) {
  return call_api(SPOOL_ERR_INTERNAL, [&] {
    checked(model, Kind::Model, "model");
    require(out, "out");
    const ModelConfig& c = model->model->config();
    out->n_vocab = c.n_vocab;
    out->n_ctx_train = c.n_ctx_train;
    out->n_layer = c.n_layer;
    out->n_embd = c.n_embd;
    copy_name(out->arch, sizeof out->arch, c.arch);
    copy_name(out->weight_mode, sizeof out->weight_mode, is_streaming(*model->model) ? "streaming" : "resident");
  });
}

spool_status spool_model_tokenizer(const spool_model* model, const spool_tokenizer** out) {
  return call_api(SPOOL_ERR_INTERNAL, [&] {
    checked(model, Kind::Model, "model");
    require(out, "out");
    *out = &model->tokenizer;
  });
}

spool_status spool_model_get_stats(const spool_model* model, spool_model_stats* out) {
  return call_api(SPOOL_ERR_INTERNAL, [&] {
    checked(model, Kind::Model, "model");
    require(out, "out");
    const StoreStats s = model->model->weights().stats_snapshot();
    *out = {};
    out->bytes_read = s.bytes_read;
    out->resident_bytes = s.resident_bytes;
    // The resident store keeps no counters: every weight is mapped (or converted) in memory.
    if (out->resident_bytes == 0 && !is_streaming(*model->model))
      out->resident_bytes = model->model->file().manifest.total_bytes();
    out->budget_bytes = s.budget_bytes;
    out->cache_hits = s.hits_total();
    out->cache_misses = s.lookups() - s.hits_total();
    out->io_wait_ns = s.io_wait_ns;
  });
}

}  // extern "C"
