// The C API's error boundary (capi_internal.h): the handle registry, the
// thread's last-error message, and the mapping of C++ failures to status codes.
#include <cstring>
#include <new>
#include <unordered_map>

#include "capi/capi_internal.h"
#include "core/error.h"

namespace spool::capi {
namespace {

thread_local std::string g_last_error;

std::mutex g_handles_mu;
std::unordered_map<const void*, Kind>& handles() {
  static auto* h = new std::unordered_map<const void*, Kind>();  // never destroyed: safe at exit
  return *h;
}

}  // namespace

void register_handle(const void* p, Kind kind) {
  std::lock_guard<std::mutex> lock(g_handles_mu);
  handles()[p] = kind;
}

void unregister_handle(const void* p) {
  std::lock_guard<std::mutex> lock(g_handles_mu);
  handles().erase(p);
}

bool is_live(const void* p, Kind kind) {
  std::lock_guard<std::mutex> lock(g_handles_mu);
  auto it = handles().find(p);
  return it != handles().end() && it->second == kind;
}

void fail(spool_status status, const std::string& what) { throw ApiError{status, what}; }

void require(const void* p, const char* what) {
  if (!p) fail(SPOOL_ERR_INVALID_ARGUMENT, std::string(what) + " is NULL");
}

spool_status call_api(spool_status error_status, const std::function<void()>& body) {
  spool_status status = SPOOL_OK;
  try {
    body();
    return SPOOL_OK;
  } catch (const ApiError& e) {
    status = e.status;
    g_last_error = e.what;
  } catch (const QueueFull& e) {
    status = SPOOL_ERR_QUEUE_FULL;
    g_last_error = e.what();
  } catch (const InvalidRequest& e) {
    status = SPOOL_ERR_INVALID_ARGUMENT;
    g_last_error = e.what();
  } catch (const Error& e) {
    status = error_status;
    g_last_error = e.what();
  } catch (const std::bad_alloc&) {
    status = SPOOL_ERR_OUT_OF_MEMORY;
    g_last_error = "out of memory";
  } catch (const std::exception& e) {
    status = SPOOL_ERR_INTERNAL;
    g_last_error = std::string("internal error: ") + e.what();
  } catch (...) {
    status = SPOOL_ERR_INTERNAL;
    g_last_error = "internal error: unknown exception";
  }
  return status;
}

void write_text(const std::string& s, char* out, size_t capacity, size_t* n_bytes) {
  require(n_bytes, "n_bytes");
  if (capacity > 0) require(out, "the output buffer");
  *n_bytes = s.size();
  if (s.size() + 1 > capacity) {
    if (capacity > 0) out[0] = 0;
    fail(SPOOL_ERR_BUFFER_TOO_SMALL, "the text needs " + std::to_string(s.size() + 1) + " bytes (with its NUL), the buffer has " +
                                         std::to_string(capacity));
  }
  std::memcpy(out, s.data(), s.size());
  out[s.size()] = 0;
}

spool_finish_reason finish_reason_of(FinishReason r) {
  switch (r) {
    case FinishReason::None: return SPOOL_FINISH_NONE;
    case FinishReason::Stop: return SPOOL_FINISH_STOP;
    case FinishReason::Length: return SPOOL_FINISH_LENGTH;
    case FinishReason::Cancelled: return SPOOL_FINISH_CANCELLED;
    case FinishReason::Error: return SPOOL_FINISH_ERROR;
  }
  return SPOOL_FINISH_ERROR;
}

}  // namespace spool::capi

using namespace spool::capi;

extern "C" {

const char* spool_last_error(void) { return g_last_error.c_str(); }

int spool_api_version(void) { return SPOOL_API_VERSION; }

const char* spool_status_name(spool_status status) {
  switch (status) {
    case SPOOL_OK: return "SPOOL_OK";
    case SPOOL_ERR_INVALID_ARGUMENT: return "SPOOL_ERR_INVALID_ARGUMENT";
    case SPOOL_ERR_LOAD: return "SPOOL_ERR_LOAD";
    case SPOOL_ERR_UNSUPPORTED: return "SPOOL_ERR_UNSUPPORTED";
    case SPOOL_ERR_BUFFER_TOO_SMALL: return "SPOOL_ERR_BUFFER_TOO_SMALL";
    case SPOOL_ERR_BUSY: return "SPOOL_ERR_BUSY";
    case SPOOL_ERR_QUEUE_FULL: return "SPOOL_ERR_QUEUE_FULL";
    case SPOOL_ERR_NOT_FOUND: return "SPOOL_ERR_NOT_FOUND";
    case SPOOL_ERR_RUNTIME: return "SPOOL_ERR_RUNTIME";
    case SPOOL_ERR_OUT_OF_MEMORY: return "SPOOL_ERR_OUT_OF_MEMORY";
    case SPOOL_ERR_INTERNAL: return "SPOOL_ERR_INTERNAL";
  }
  return "unknown status";
}

}  // extern "C"
