// HTTP(S) Range-request storage on libcurl's multi interface. See http_storage.h.
#include "storage/http_storage.h"

#include <curl/curl.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <deque>

#include "core/error.h"
#include "storage/http_range.h"

static_assert(CURL_ERROR_SIZE <= sizeof(spool::RangeTransfer::errbuf));

namespace spool {

namespace {

using Clock = std::chrono::steady_clock;

void global_init() {
  static std::once_flag once;
  std::call_once(once, [] {
    if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) throw Error("libcurl failed to initialise");
  });
}

// Curl errors worth another attempt: the network or the server hiccuped.
bool retriable(CURLcode rc) {
  switch (rc) {
    case CURLE_COULDNT_RESOLVE_HOST: case CURLE_COULDNT_RESOLVE_PROXY: case CURLE_COULDNT_CONNECT:
    case CURLE_PARTIAL_FILE: case CURLE_RECV_ERROR: case CURLE_SEND_ERROR: case CURLE_OPERATION_TIMEDOUT:
    case CURLE_GOT_NOTHING: case CURLE_SSL_CONNECT_ERROR: case CURLE_HTTP2: case CURLE_HTTP2_STREAM:
      return true;
    default:
      return false;
  }
}

using Transfer = RangeTransfer;

}  // namespace

struct HttpStorage::Context {
  CURLM* multi = nullptr;
  std::vector<CURL*> idle;  // easy handles ready for another transfer
  std::vector<CURL*> all;
  Context() {
    multi = curl_multi_init();
    if (!multi) throw Error("libcurl: cannot create a multi handle");
  }
  ~Context() {
    for (CURL* e : all) {
      curl_multi_remove_handle(multi, e);
      curl_easy_cleanup(e);
    }
    curl_multi_cleanup(multi);
  }
};

HttpStorage::~HttpStorage() = default;

std::unique_ptr<HttpStorage::Context> HttpStorage::take_context() {
  {
    std::lock_guard<std::mutex> lock(pool_mu_);
    if (!idle_.empty()) {
      std::unique_ptr<Context> c = std::move(idle_.back());
      idle_.pop_back();
      return c;
    }
  }
  return std::make_unique<Context>();
}

void HttpStorage::give_context(std::unique_ptr<Context> c) {
  std::lock_guard<std::mutex> lock(pool_mu_);
  idle_.push_back(std::move(c));
}

namespace {

// Runs every transfer to completion on c's multi handle, at most queue_depth
// at once, retrying what can be retried. Throws spool::Error on the first
// failure that cannot (or can no longer) be retried.
// Returns the URL the last transfer was served from (after redirects).
std::string run_transfers(HttpStorage::Context& c, const std::string& url, std::vector<Transfer>& ts,
                          const StorageOptions& options, const HttpTuning& tuning, std::atomic<uint64_t>& retries) {
  std::string effective = url;
  std::deque<size_t> ready;
  for (size_t i = 0; i < ts.size(); ++i) ready.push_back(i);
  std::vector<size_t> waiting;  // failed attempts waiting for their backoff
  size_t active = 0, done = 0;
  const size_t depth = (size_t)options.queue_depth;

  auto fail = [&](const Transfer& t, const std::string& why) {
    // Drop whatever is still in flight so the handles can be reused.
    for (CURL* e : c.all) curl_multi_remove_handle(c.multi, e);
    c.idle = c.all;
    throw Error("HTTP GET '" + url + "' " + t.range() + ": " + why);
  };

  auto start = [&](size_t i) {
    Transfer& t = ts[i];
    t.reset_attempt();
    CURL* e;
    if (!c.idle.empty()) {
      e = c.idle.back();
      c.idle.pop_back();
    } else {
      e = curl_easy_init();
      if (!e) throw Error("libcurl: cannot create an easy handle");
      c.all.push_back(e);
      curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
      curl_easy_setopt(e, CURLOPT_FOLLOWLOCATION, 1L);
      curl_easy_setopt(e, CURLOPT_MAXREDIRS, 10L);
      curl_easy_setopt(e, CURLOPT_PROTOCOLS_STR, "http,https");
      curl_easy_setopt(e, CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
      curl_easy_setopt(e, CURLOPT_TCP_KEEPALIVE, 1L);
      curl_easy_setopt(e, CURLOPT_USERAGENT, "spool");
      curl_easy_setopt(e, CURLOPT_BUFFERSIZE, 256L * 1024);
      if (!tuning.ca_file.empty()) curl_easy_setopt(e, CURLOPT_CAINFO, tuning.ca_file.c_str());
      curl_easy_setopt(e, CURLOPT_HEADERFUNCTION, on_range_header);
      curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, on_range_body);
    }
    curl_easy_setopt(e, CURLOPT_URL, url.c_str());
    curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT, tuning.connect_timeout_s);
    curl_easy_setopt(e, CURLOPT_LOW_SPEED_LIMIT, 1L);
    curl_easy_setopt(e, CURLOPT_LOW_SPEED_TIME, tuning.stall_timeout_s);
    const std::string range = std::to_string(t.offset) + "-" + std::to_string(t.offset + t.n - 1);
    curl_easy_setopt(e, CURLOPT_RANGE, range.c_str());  // copied by libcurl
    curl_easy_setopt(e, CURLOPT_HEADERDATA, &t);
    curl_easy_setopt(e, CURLOPT_WRITEDATA, &t);
    curl_easy_setopt(e, CURLOPT_ERRORBUFFER, t.errbuf);
    curl_easy_setopt(e, CURLOPT_PRIVATE, (void*)&t);
    if (curl_multi_add_handle(c.multi, e) != CURLM_OK) throw Error("libcurl: cannot add a transfer");
    ++active;
  };

  auto finish = [&](CURL* e, CURLcode rc) {
    Transfer* tp = nullptr;
    curl_easy_getinfo(e, CURLINFO_PRIVATE, (char**)&tp);
    curl_multi_remove_handle(c.multi, e);
    c.idle.push_back(e);
    --active;
    Transfer& t = *tp;
    if (!t.fatal.empty()) fail(t, t.fatal);
    std::string why;
    bool again = false;
    if (rc != CURLE_OK) {
      why = std::string(curl_easy_strerror(rc)) + (t.errbuf[0] ? std::string(" (") + t.errbuf + ")" : "");
      if (rc == CURLE_PARTIAL_FILE || (t.got > 0 && t.got < t.n))
        why = "short body: received " + std::to_string(t.got) + " of " + std::to_string(t.n) + " bytes; " + why;
      again = retriable(rc);
    } else if (t.status >= 200 && t.status < 300) {
      if (t.got == t.n) {
        ++done;
        const char* eff = nullptr;
        if (curl_easy_getinfo(e, CURLINFO_EFFECTIVE_URL, &eff) == CURLE_OK && eff) effective = eff;
        return;
      }
      why = "short body: received " + std::to_string(t.got) + " of " + std::to_string(t.n) + " bytes";
      again = true;
    } else {
      why = "server answered " + (t.status_line.empty() ? std::to_string(t.status) : t.status_line);
      again = t.status >= 500 || t.status == 429 || t.status == 408;
    }
    if (!again) fail(t, why);
    if (t.attempt >= options.http_retries)
      fail(t, "failed after " + std::to_string(t.attempt + 1) + " attempt(s); last: " + why);
    // Exponential backoff; a server's Retry-After is honoured up to the longest backoff.
    long delay = std::min<long>((long)tuning.backoff_ms << std::min(t.attempt, 20), tuning.max_backoff_ms);
    delay = std::max(delay, std::min<long>(t.retry_after_s * 1000, tuning.max_backoff_ms));
    ++t.attempt;
    ++retries;
    t.due = Clock::now() + std::chrono::milliseconds(delay);
    waiting.push_back(tp - ts.data());
  };

  while (done < ts.size()) {
    const auto now = Clock::now();
    for (size_t k = 0; k < waiting.size();) {
      if (ts[waiting[k]].due <= now) {
        ready.push_front(waiting[k]);
        waiting.erase(waiting.begin() + k);
      } else {
        ++k;
      }
    }
    while (active < depth && !ready.empty()) {
      start(ready.front());
      ready.pop_front();
    }
    int running = 0;
    if (curl_multi_perform(c.multi, &running) != CURLM_OK) throw Error("libcurl: multi transfer failed for " + url);
    int left = 0;
    while (CURLMsg* m = curl_multi_info_read(c.multi, &left))
      if (m->msg == CURLMSG_DONE) finish(m->easy_handle, m->data.result);
    if (done == ts.size()) break;
    if (!ready.empty() && active < depth) continue;
    int timeout_ms = 1000;
    for (size_t i : waiting) {
      const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(ts[i].due - Clock::now()).count();
      timeout_ms = std::max(0, std::min<int>(timeout_ms, (int)ms));
    }
    curl_multi_poll(c.multi, nullptr, 0, timeout_ms, nullptr);
  }
  return effective;
}

}  // namespace

HttpStorage::HttpStorage(const std::string& url, const StorageOptions& options, const HttpTuning& tuning)
    : url_(url), options_(options), tuning_(tuning) {
  global_init();
  if (tuning_.ca_file.empty())
    if (const char* ca = std::getenv("CURL_CA_BUNDLE"); ca && *ca) tuning_.ca_file = ca;
  if (options_.queue_depth < 1) options_.queue_depth = 1;
  if (options_.http_retries < 0) options_.http_retries = 0;
  uint8_t byte = 0;
  Transfer probe;
  probe.offset = 0;
  probe.n = 1;
  probe.dst = &byte;
  probe.probe = true;
  std::vector<Transfer> ts{probe};
  std::unique_ptr<Context> c = take_context();
  target_ = run_transfers(*c, url_, ts, options_, tuning_, retries_);
  give_context(std::move(c));
  size_ = ts[0].total;
}

void HttpStorage::run(std::span<const ReadRequest> reqs) {
  std::vector<Transfer> ts;
  for (const ReadRequest& r : reqs) {
    if (r.n == 0) continue;
    if (r.offset > size_ || r.n > size_ - r.offset)
      throw Error("'" + url_ + "': read of " + std::to_string(r.n) + " bytes at offset " + std::to_string(r.offset) +
                  " is past the end of the file (" + std::to_string(size_) + " bytes)");
    for (uint64_t pos = 0; pos < r.n; pos += tuning_.chunk_bytes) {
      Transfer t;
      t.offset = r.offset + pos;
      t.n = std::min<uint64_t>(tuning_.chunk_bytes, r.n - pos);
      t.dst = static_cast<uint8_t*>(r.dst) + pos;
      t.whole_size = size_;
      ts.push_back(std::move(t));
    }
  }
  if (ts.empty()) return;
  std::unique_ptr<Context> c = take_context();
  std::string target;
  {
    std::lock_guard<std::mutex> lock(pool_mu_);
    target = target_;
  }
  try {
    // On an error c is destroyed: its connections close.
    target = run_transfers(*c, target, ts, options_, tuning_, retries_);
  } catch (const Error&) {
    if (target == url_) throw;
    // The redirect target (a signed CDN URL, say) may have expired: start again from the URL given.
    c = take_context();
    for (Transfer& t : ts) t.attempt = 0;
    target = run_transfers(*c, url_, ts, options_, tuning_, retries_);
  }
  give_context(std::move(c));
  {
    std::lock_guard<std::mutex> lock(pool_mu_);
    target_ = target;
  }
  uint64_t bytes = 0;
  for (const Transfer& t : ts) bytes += t.n;
  counters_.bytes += bytes;
  counters_.requests += ts.size();
}

void HttpStorage::read(std::span<const ReadRequest> reqs) {
  const auto t0 = Clock::now();
  run(reqs);
  counters_.wait_ns += (uint64_t)std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - t0).count();
}

void HttpStorage::read_unaligned(uint64_t offset, size_t n, void* dst) {
  if (n == 0) return;
  if (offset > size_ || n > size_ - offset)
    throw Error("'" + url_ + "': read of " + std::to_string(n) + " bytes at offset " + std::to_string(offset) +
                " is past the end of the file (" + std::to_string(size_) + " bytes)");
  const uint64_t B = tuning_.header_block_bytes;
  if (n >= B || tuning_.header_blocks <= 0) {
    const ReadRequest r{offset, n, dst};
    read({&r, 1});
    return;
  }
  const auto t0 = Clock::now();
  std::lock_guard<std::mutex> lock(cache_mu_);
  auto* out = static_cast<uint8_t*>(dst);
  for (uint64_t pos = offset; pos < offset + n;) {
    const uint64_t start = pos / B * B;
    Block* blk = nullptr;
    for (Block& b : blocks_)
      if (b.start == start) blk = &b;
    if (!blk) {
      Block fresh;
      fresh.start = start;
      fresh.data.resize(std::min<uint64_t>(B, size_ - start));
      const ReadRequest r{start, fresh.data.size(), fresh.data.data()};
      run({&r, 1});
      if ((int)blocks_.size() >= tuning_.header_blocks) {
        auto lru = std::min_element(blocks_.begin(), blocks_.end(),
                                    [](const Block& a, const Block& b) { return a.last_use < b.last_use; });
        *lru = std::move(fresh);
        blk = &*lru;
      } else {
        blocks_.push_back(std::move(fresh));
        blk = &blocks_.back();
      }
    }
    blk->last_use = ++use_clock_;
    const uint64_t k = std::min<uint64_t>(offset + n - pos, start + blk->data.size() - pos);
    std::memcpy(out, blk->data.data() + (pos - start), k);
    out += k;
    pos += k;
  }
  counters_.wait_ns += (uint64_t)std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - t0).count();
}

}  // namespace spool
