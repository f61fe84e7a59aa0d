// HTTP(S) storage against real servers: an nginx started on 127.0.0.1 by the
// test (ranges, parallel reads, keep-alive, 404, a location without range
// support; models loaded from URLs give the same logits and text as the local
// files, through the library and the CLI), and a cpp-httplib server for the
// faults nginx cannot make (503 then success, a connection dropped mid-body,
// a body longer than the range).
#include <gtest/gtest.h>
#include <httplib.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <set>
#include <sstream>
#include <thread>

#include "core/error.h"
#include "format/gguf.h"
#include "storage/http_storage.h"
#include "test_util.h"
#include "weights/streaming_store.h"
#include "weights/weight_store.h"

using namespace spool;
namespace fs = std::filesystem;

namespace {

const std::string kShared = SPOOL_SHARED_DIR;
const std::string kBin = SPOOL_BIN;
const std::string kFixtures = kShared + "/fixtures/gguf";
const std::string kModels = kShared + "/models";
const char* kNginx = "/usr/sbin/nginx";

std::vector<uint8_t> read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(in), {});
}

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// An nginx on 127.0.0.1 at a free port of 18100-18199, single process, in the
// foreground, with its config, logs and temp files in a fresh temp directory:
// / serves the GGUF fixtures, /models/ the shared models, /norange/ the
// fixtures with range support off, /tmp/ the temp directory.
class Nginx {
 public:
  Nginx() {
    char tmpl[] = "/tmp/spool-http-test-XXXXXX";
    if (!mkdtemp(tmpl)) throw std::runtime_error("mkdtemp failed");
    dir_ = tmpl;
    fs::create_directories(dir_ + "/files");
    const std::string openssl = "openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 2 -subj /CN=127.0.0.1 "
                                "-addext subjectAltName=IP:127.0.0.1 -keyout " + dir_ + "/key.pem -out " + dir_ +
                                "/cert.pem >" + dir_ + "/openssl.log 2>&1";
    if (std::system(openssl.c_str()) != 0)
      throw std::runtime_error("cannot make a test certificate with the openssl command (install openssl): see " +
                               dir_ + "/openssl.log");
    std::mt19937 rng((unsigned)getpid() ^ (unsigned)std::chrono::steady_clock::now().time_since_epoch().count());
    const int first = 18100 + (int)(rng() % 100);
    for (int k = 0; k < 100 && pid_ < 0; ++k) try_port(18100 + (first - 18100 + k) % 100);
    if (pid_ < 0) throw std::runtime_error("could not start nginx on any port of 18100-18199; see " + dir_);
  }
  ~Nginx() {
    if (pid_ > 0) {
      kill(pid_, SIGTERM);
      int st;
      waitpid(pid_, &st, 0);
    }
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  std::string url(const std::string& path) const { return "http://127.0.0.1:" + std::to_string(port_) + path; }
  // The same locations over TLS (a self-signed certificate for 127.0.0.1: ca_file()).
  std::string https_url(const std::string& path) const {
    return "https://127.0.0.1:" + std::to_string(tls_port_) + path;
  }
  std::string ca_file() const { return dir_ + "/cert.pem"; }
  const std::string& dir() const { return dir_; }
  std::string access_log() const { return read_text(dir_ + "/access.log"); }

 private:
  void try_port(int port) {
    const int tls_port = 18100 + (port - 18100 + 50) % 100;
    const std::string conf = dir_ + "/nginx.conf";
    std::ofstream(conf) << "worker_processes 1;\n"
                        << "daemon off;\nmaster_process off;\n"
                        << "pid " << dir_ << "/nginx.pid;\n"
                        << "error_log " << dir_ << "/error.log;\n"
                        << "events { worker_connections 256; }\n"
                        << "http {\n"
                        << "  log_format conn '$connection $connection_requests $status \"$request\" $http_range';\n"
                        << "  access_log " << dir_ << "/access.log conn;\n"
                        << "  client_body_temp_path " << dir_ << "/t_body;\n"
                        << "  proxy_temp_path " << dir_ << "/t_proxy;\n"
                        << "  fastcgi_temp_path " << dir_ << "/t_fastcgi;\n"
                        << "  uwsgi_temp_path " << dir_ << "/t_uwsgi;\n"
                        << "  scgi_temp_path " << dir_ << "/t_scgi;\n"
                        << "  keepalive_requests 100000;\n"
                        << "  server {\n"
                        << "    listen 127.0.0.1:" << port << ";\n"
                        << "    listen 127.0.0.1:" << tls_port << " ssl;\n"
                        << "    ssl_certificate " << dir_ << "/cert.pem;\n"
                        << "    ssl_certificate_key " << dir_ << "/key.pem;\n"
                        << "    location /models/ { alias " << kModels << "/; }\n"
                        << "    location /norange/ { alias " << kFixtures << "/; max_ranges 0; }\n"
                        << "    location /tmp/ { alias " << dir_ << "/files/; }\n"
                        << "    location / { root " << kFixtures << "; }\n"
                        << "  }\n}\n";
    fs::remove(dir_ + "/nginx.pid");
    const pid_t pid = fork();
    if (pid == 0) {
      execl(kNginx, kNginx, "-p", dir_.c_str(), "-c", conf.c_str(), (char*)nullptr);
      _exit(127);
    }
    // nginx writes its pid file only after binding its port; if the port is taken it exits.
    for (int i = 0; i < 500; ++i) {
      int st;
      if (waitpid(pid, &st, WNOHANG) == pid) return;  // failed (port in use?): try the next one
      if (fs::exists(dir_ + "/nginx.pid")) {
        pid_ = pid;
        port_ = port;
        tls_port_ = tls_port;
        return;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    kill(pid, SIGKILL);
    int st;
    waitpid(pid, &st, 0);
  }

  std::string dir_;
  pid_t pid_ = -1;
  int port_ = 0, tls_port_ = 0;
};

class HttpStorageTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!fs::exists(kNginx)) return;  // each test fails with the install hint
    try {
      nginx_ = new Nginx();
    } catch (const std::exception& e) {
      start_error_ = e.what();
    }
  }
  static void TearDownTestSuite() {
    delete nginx_;
    nginx_ = nullptr;
  }
  void SetUp() override {
    ASSERT_TRUE(fs::exists(kNginx)) << "these tests need nginx at " << kNginx
                                    << ": install the Debian package nginx-light (scripts/install-deps.sh does)";
    ASSERT_NE(nginx_, nullptr) << start_error_;
  }
  static HttpTuning fast_tuning() {
    HttpTuning t;
    t.backoff_ms = 10;
    return t;
  }
  static Nginx* nginx_;
  static std::string start_error_;
};
Nginx* HttpStorageTest::nginx_ = nullptr;
std::string HttpStorageTest::start_error_;

TEST_F(HttpStorageTest, RangeReadsReturnTheFilesBytes) {
  const std::string path = kModels + "/llama-2-tiny-random.gguf";
  const std::vector<uint8_t> want = read_file(path);
  ASSERT_GT(want.size(), 1000000u);
  HttpTuning tuning = fast_tuning();
  tuning.chunk_bytes = 64 << 10;  // big requests are split into many ranges
  StorageOptions opt;
  opt.queue_depth = 8;
  HttpStorage s(nginx_->url("/models/llama-2-tiny-random.gguf"), opt, tuning);
  ASSERT_EQ(s.size(), want.size());

  // Many random ranges (some larger than a chunk) in one call, then from four threads at once.
  std::mt19937_64 rng(7);
  auto random_reqs = [&](int n, std::vector<std::vector<uint8_t>>& bufs) {
    std::vector<ReadRequest> reqs;
    bufs.assign(n, {});
    for (int i = 0; i < n; ++i) {
      const uint64_t len = 1 + rng() % (i % 4 == 0 ? 300000 : 5000);
      const uint64_t off = rng() % (want.size() - len + 1);
      bufs[i].assign(len, 0xAB);
      reqs.push_back({off, len, bufs[i].data()});
    }
    return reqs;
  };
  auto check = [&](const std::vector<ReadRequest>& reqs) {
    for (const ReadRequest& r : reqs)
      ASSERT_EQ(std::memcmp(r.dst, want.data() + r.offset, r.n), 0) << "range at " << r.offset << " len " << r.n;
  };
  std::vector<std::vector<uint8_t>> bufs;
  const std::vector<ReadRequest> reqs = random_reqs(200, bufs);
  s.read(reqs);
  check(reqs);
  uint64_t total = 0;
  for (const ReadRequest& r : reqs) total += r.n;
  EXPECT_EQ(s.counters().bytes.load(), total);  // the size probe is not counted as delivered data
  EXPECT_GE(s.counters().requests.load(), reqs.size());

  std::vector<std::vector<ReadRequest>> per_thread(4);
  std::vector<std::vector<std::vector<uint8_t>>> thread_bufs(4);
  for (int t = 0; t < 4; ++t) per_thread[t] = random_reqs(50, thread_bufs[t]);
  std::vector<std::thread> threads;
  std::vector<std::string> errors(4);
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] { errors[t] = error_of([&] { s.read(per_thread[t]); }); });
  for (auto& th : threads) th.join();
  for (int t = 0; t < 4; ++t) {
    EXPECT_EQ(errors[t], "");
    check(per_thread[t]);
  }

  // Small unaligned reads (headers) are served from cached 1 MiB blocks.
  const uint64_t before = s.counters().bytes.load();
  for (int i = 0; i < 300; ++i) {
    const uint64_t off = rng() % (want.size() - 64);
    uint8_t b[64];
    s.read_unaligned(off, sizeof b, b);
    ASSERT_EQ(std::memcmp(b, want.data() + off, sizeof b), 0) << off;
  }
  EXPECT_LE(s.counters().bytes.load() - before, want.size());  // each block of the file fetched once
  EXPECT_EQ(s.retries(), 0u);

  // Keep-alive: nginx saw far fewer connections than requests.
  std::set<std::string> conns;
  size_t lines = 0;
  std::istringstream log(nginx_->access_log());
  for (std::string line; std::getline(log, line);)
    if (line.find("llama-2-tiny-random") != std::string::npos) {
      ++lines;
      conns.insert(line.substr(0, line.find(' ')));
    }
  EXPECT_GT(lines, 400u);
  EXPECT_LE(conns.size(), 5u * (size_t)opt.queue_depth) << "connections are not reused";

  const std::string e = error_of([&] {
    uint8_t b[16];
    s.read_unaligned(want.size() - 8, 16, b);
  });
  EXPECT_NE(e.find("past the end"), std::string::npos) << e;
  EXPECT_NE(e.find("llama-2-tiny-random.gguf"), std::string::npos) << e;
}

TEST_F(HttpStorageTest, ClearErrorsFor404AndServersWithoutRanges) {
  const std::string missing = nginx_->url("/no-such-model.gguf");
  std::string e = error_of([&] { HttpStorage s(missing, {}, fast_tuning()); });
  EXPECT_NE(e.find(missing), std::string::npos) << e;
  EXPECT_NE(e.find("404"), std::string::npos) << e;

  e = error_of([&] { load_model(missing, {}); });
  EXPECT_NE(e.find("404"), std::string::npos) << e;

  const std::string norange = nginx_->url("/norange/qwen2-tiny.f32.gguf");
  e = error_of([&] { HttpStorage s(norange, {}, fast_tuning()); });
  EXPECT_NE(e.find(norange), std::string::npos) << e;
  EXPECT_NE(e.find("does not support range requests"), std::string::npos) << e;

  // Nothing listening: connection refused, retried, then a clear error.
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(bind(fd, (sockaddr*)&addr, sizeof addr), 0);
  socklen_t len = sizeof addr;
  getsockname(fd, (sockaddr*)&addr, &len);
  close(fd);
  const std::string refused = "http://127.0.0.1:" + std::to_string(ntohs(addr.sin_port)) + "/m.gguf";
  StorageOptions opt;
  opt.http_retries = 2;
  e = error_of([&] { HttpStorage s(refused, opt, fast_tuning()); });
  EXPECT_NE(e.find(refused), std::string::npos) << e;
  EXPECT_NE(e.find("after 3 attempt"), std::string::npos) << e;

  e = error_of([&] { load_model(nginx_->url("/models/llama2-tokenizer-32k/"), {}); });
  EXPECT_NE(e.find("only GGUF files"), std::string::npos) << e;
}

// The library: a model opened from its URL gives bit-identical logits and
// greedy tokens to the same file opened locally.
TEST_F(HttpStorageTest, ModelsFromUrlsMatchTheLocalFiles) {
  // qwen2-tiny ties its output to token_embd: rows are read back after packing.
  for (const std::string name : {"/qwen2-tiny.f32.gguf", "/qwen2-tiny.q8_0.gguf", "/mixtral-tiny.q8_0.gguf",
                                 "/deepseek3-tiny.q8_0.gguf", "/models/stories260K.gguf"}) {
    const std::string local = name.rfind("/models/", 0) == 0 ? kShared + name : kFixtures + name;
    LoadOptions lo;
    lo.n_threads = 2;
    auto a = load_model(local, lo);
    auto b = load_model(nginx_->url(name), lo);
    EXPECT_STREQ(b->weights().mode(), "loaded (read into memory)");
    EXPECT_EQ(b->file().manifest.files[0], nginx_->url(name));
    std::vector<int32_t> ids;
    for (int i = 0; i < 12; ++i) ids.push_back((i * 37 + 5) % a->config().n_vocab);
    const std::vector<float> la = test::all_logits(*a, ids), lb = test::all_logits(*b, ids);
    ASSERT_EQ(la.size(), lb.size()) << name;
    EXPECT_EQ(std::memcmp(la.data(), lb.data(), la.size() * sizeof(float)), 0) << name;
    EXPECT_EQ(test::greedy(*a, {1, 2, 3}, 12), test::greedy(*b, {1, 2, 3}, 12)) << name;
  }
}

// The streaming store reads through the same Storage: a URL model streamed
// under a budget small enough to evict every step gives the same logits as
// the local file streamed under that budget, and (F32, where streaming and
// resident kernels agree bit for bit) as the local file resident.
TEST_F(HttpStorageTest, StreamingFromUrlMatchesLocalFile) {
  for (const std::string name : {"/mixtral-tiny.q8_0.gguf", "/deepseek3-tiny.f32.gguf"}) {
    const std::string local = kFixtures + name, url = nginx_->url(name);
    LoadOptions lo;
    lo.n_threads = 2;
    lo.weight_budget = 1ull << 30;
    auto min_budget = [&](const std::string& p) {
      return static_cast<StreamingStore&>(load_model(p, lo)->weights()).minimum_budget();
    };
    lo.weight_budget = std::max(min_budget(local), min_budget(url));  // local slots are O_DIRECT-aligned
    auto streamed_local = load_model(local, lo);
    auto streamed_url = load_model(url, lo);
    EXPECT_STREQ(streamed_url->weights().mode(), "streaming");
    std::vector<int32_t> ids;
    for (int i = 0; i < 10; ++i) ids.push_back((i * 37 + 5) % streamed_local->config().n_vocab);
    const std::vector<float> la = test::all_logits(*streamed_local, ids), lb = test::all_logits(*streamed_url, ids);
    ASSERT_EQ(la.size(), lb.size()) << name;
    EXPECT_EQ(std::memcmp(la.data(), lb.data(), la.size() * sizeof(float)), 0) << name;
    EXPECT_EQ(test::greedy(*streamed_local, {1, 2, 3}, 8), test::greedy(*streamed_url, {1, 2, 3}, 8)) << name;
    EXPECT_GT(streamed_url->weights().stats_snapshot().evictions, 0u) << name;
    if (name.find(".f32.") != std::string::npos) {
      LoadOptions ro;
      ro.n_threads = 2;
      auto resident = load_model(local, ro);
      const std::vector<float> lr = test::all_logits(*resident, ids);
      EXPECT_EQ(std::memcmp(lr.data(), lb.data(), lr.size() * sizeof(float)), 0) << name;
    }
  }
}

// The CLI: `spool logits` and greedy `spool run` (ids and text) print the same for a URL as for the file.
TEST_F(HttpStorageTest, CliOnUrlMatchesLocalFile) {
  int status = -1;
  const std::string local = kFixtures + "/qwen2-tiny.f32.gguf", url = nginx_->url("/qwen2-tiny.f32.gguf");
  const std::string ids = "1,22,333,44,5,66,7,88";
  const std::string out_a = nginx_->dir() + "/a.st", out_b = nginx_->dir() + "/b.st";
  test::run_stdout(kBin + " logits -m " + local + " -t 2 --ids " + ids + " --out " + out_a + " 2>&1", &status);
  ASSERT_EQ(status, 0);
  test::run_stdout(kBin + " logits -m " + url + " -t 2 --ids " + ids + " --out " + out_b + " 2>&1", &status);
  ASSERT_EQ(status, 0);
  EXPECT_EQ(read_file(out_a), read_file(out_b));

  const std::string run_ids = " -t 2 --prompt-ids " + ids + " -n 16 --temp 0 --output-ids 2>/dev/null";
  const std::string ga = test::run_stdout(kBin + " run -m " + local + run_ids, &status);
  EXPECT_EQ(status, 0);
  const std::string gb = test::run_stdout(kBin + " run -m " + url + run_ids, &status);
  EXPECT_EQ(status, 0);
  EXPECT_FALSE(ga.empty());
  EXPECT_EQ(ga, gb);

  const std::string text = " -t 2 --prompt 'Once upon a time' -n 40 --temp 0 2>/dev/null";
  const std::string ta = test::run_stdout(kBin + " run -m " + kModels + "/stories260K.gguf" + text, &status);
  EXPECT_EQ(status, 0);
  const std::string tb = test::run_stdout(kBin + " run -m " + nginx_->url("/models/stories260K.gguf") + text, &status);
  EXPECT_EQ(status, 0);
  EXPECT_GT(ta.size(), 40u);
  EXPECT_EQ(ta, tb);

  const std::string err = test::run_stdout(kBin + " run -m " + nginx_->url("/missing.gguf") + " -n 2 2>&1", &status);
  EXPECT_NE(status, 0);
  EXPECT_NE(err.find(nginx_->url("/missing.gguf")), std::string::npos) << err;
  EXPECT_NE(err.find("404"), std::string::npos) << err;
}

// HTTPS: nginx with a self-signed certificate; trusted through HttpTuning::ca_file
// (library) and $CURL_CA_BUNDLE (CLI), refused without it.
TEST_F(HttpStorageTest, HttpsWorksAndVerifiesThePeer) {
  const std::string url = nginx_->https_url("/qwen2-tiny.q8_0.gguf");
  const std::vector<uint8_t> want = read_file(kFixtures + "/qwen2-tiny.q8_0.gguf");
  HttpTuning tuning = fast_tuning();
  tuning.ca_file = nginx_->ca_file();
  tuning.chunk_bytes = 8 << 10;
  HttpStorage s(url, {}, tuning);
  std::vector<uint8_t> got(want.size());
  const ReadRequest r{0, got.size(), got.data()};
  s.read({&r, 1});
  EXPECT_EQ(got, want);

  const std::string e = error_of([&] { HttpStorage bad(url, {}, fast_tuning()); });
  EXPECT_NE(e.find(url), std::string::npos) << e;
  EXPECT_NE(e.find("certificate"), std::string::npos) << e;

  int status = -1;
  const std::string run_ids = " -t 2 --prompt-ids 1,2,3,4 -n 12 --temp 0 --output-ids 2>/dev/null";
  const std::string ga = test::run_stdout(kBin + " run -m " + kFixtures + "/qwen2-tiny.q8_0.gguf" + run_ids, &status);
  EXPECT_EQ(status, 0) << ga;
  const std::string gb = test::run_stdout("CURL_CA_BUNDLE=" + nginx_->ca_file() + " " + kBin + " run -m " + url +
                                              run_ids, &status);
  EXPECT_EQ(status, 0) << gb;
  EXPECT_FALSE(ga.empty());
  EXPECT_EQ(ga, gb);
}

// A split model over HTTP (name-00001-of-00002.gguf pulls in its second shard),
// read through the loaded store; and the loaded store on a local file holds
// the same bytes as the memory-mapped one.
TEST_F(HttpStorageTest, SplitModelsOverHttpAndLoadedStoreOnLocalFiles) {
  auto shard = [](int no, const std::string& tname) {
    std::vector<uint8_t> b = {'G', 'G', 'U', 'F'};
    auto put = [&](auto v) {
      const auto* p = reinterpret_cast<const uint8_t*>(&v);
      b.insert(b.end(), p, p + sizeof v);
    };
    auto str = [&](const std::string& s) {
      put((uint64_t)s.size());
      b.insert(b.end(), s.begin(), s.end());
    };
    put((uint32_t)3), put((uint64_t)1), put((uint64_t)(no == 0 ? 2 : 1));
    str("split.no"), put((uint32_t)2), put((uint16_t)no);
    if (no == 0) str("split.count"), put((uint32_t)2), put((uint16_t)2);
    str(tname), put((uint32_t)1), put((uint64_t)8), put((uint32_t)0), put((uint64_t)0);
    while (b.size() % 32) b.push_back(0);
    for (int i = 0; i < 8; ++i) put((float)(i + 10 * no));
    return b;
  };
  for (int no = 0; no < 2; ++no) {
    const auto bytes = shard(no, no == 0 ? "a" : "b");
    std::ofstream(nginx_->dir() + "/files/m-0000" + std::to_string(no + 1) + "-of-00002.gguf", std::ios::binary)
        .write((const char*)bytes.data(), (std::streamsize)bytes.size());
  }
  const gguf::File f = gguf::open(nginx_->url("/tmp/m-00001-of-00002.gguf"));
  ASSERT_EQ(f.manifest.files.size(), 2u);
  EXPECT_EQ(f.manifest.files[1], nginx_->url("/tmp/m-00002-of-00002.gguf"));
  auto store = make_loaded_store(f.manifest, StorageOptions{});
  for (int no = 0; no < 2; ++no) {
    WeightRef r = store->acquire(no == 0 ? "a" : "b");
    for (int i = 0; i < 8; ++i) EXPECT_EQ(r.f32()[i], (float)(i + 10 * no));
  }

  const gguf::File local = gguf::open(kFixtures + "/mixtral-tiny.q8_0.gguf");
  auto mapped = make_resident_store(local.manifest);
  auto loaded = make_loaded_store(local.manifest, StorageOptions{});
  for (const TensorEntry& t : local.manifest.tensors) {
    WeightRef a = mapped->acquire(t.name), b = loaded->acquire(t.name);
    EXPECT_EQ(std::memcmp(a.data(), b.data(), t.bytes), 0) << t.name;
  }
}

// Throughput from nginx on loopback: 4 MiB ranges of a 256 MiB file at queue
// depths 1, 4 and 16. A measurement, not a check: disabled by default, run with
//   build/spool_tests --gtest_also_run_disabled_tests --gtest_filter='*LoopbackThroughput'
TEST_F(HttpStorageTest, DISABLED_LoopbackThroughput) {
  const uint64_t size = 256ull << 20, range = 4ull << 20;
  {
    std::vector<uint8_t> block(range);
    std::mt19937 rng(1);
    for (auto& b : block) b = (uint8_t)rng();
    std::ofstream out(nginx_->dir() + "/files/big.bin", std::ios::binary);
    for (uint64_t k = 0; k < size / range; ++k) {
      block[0] = (uint8_t)k;
      out.write((const char*)block.data(), (std::streamsize)range);
    }
  }
  std::vector<uint8_t> dst(size);
  for (int depth : {1, 4, 16}) {
    StorageOptions opt;
    opt.queue_depth = depth;
    HttpStorage s(nginx_->url("/tmp/big.bin"), opt);
    std::vector<ReadRequest> reqs;
    for (uint64_t off = 0; off < size; off += range) reqs.push_back({off, range, dst.data() + off});
    s.read(reqs);  // warm: page cache, connections
    const auto t0 = std::chrono::steady_clock::now();
    for (int rep = 0; rep < 2; ++rep) s.read(reqs);
    const double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::printf("queue depth %2d: %.0f MB/s (%d x 4 MiB ranges x 2 in %.2f s)\n", depth, 2.0 * size / sec / 1e6,
                (int)reqs.size(), sec);
    EXPECT_EQ(dst[range * 3], 3);
  }
}

// Faults nginx cannot make, from a cpp-httplib server on an OS-chosen port:
// 503s then success (retried), connections dropped mid-body (short body).
class FaultServer {
 public:
  explicit FaultServer(std::string data) : data_(std::move(data)) {
    svr_.Get("/flaky.gguf", [this](const httplib::Request&, httplib::Response& res) {
      if (fail_503_.fetch_sub(1) > 0) {
        res.status = 503;
        res.set_content("busy", "text/plain");
        return;
      }
      res.set_content(data_, "application/octet-stream");
    });
    svr_.Get("/drop.gguf", [this](const httplib::Request&, httplib::Response& res) {
      res.set_content_provider(data_.size(), "application/octet-stream",
                               [this](size_t offset, size_t length, httplib::DataSink& sink) {
                                 // The size probe (one byte) passes; longer bodies stop half way while drops last.
                                 if (length > 1 && drops_.fetch_sub(1) > 0) {
                                   sink.write(data_.data() + offset, length / 2);
                                   return false;
                                 }
                                 sink.write(data_.data() + offset, length);
                                 return true;
                               });
    });
    // Answers 206 with the requested Content-Range but a chunked body 100 bytes longer than asked for.
    svr_.Get("/oversized.gguf", [this](const httplib::Request& req, httplib::Response& res) {
      if (req.ranges.size() != 1 || req.ranges[0].second <= 0) {
        res.set_content(data_, "application/octet-stream");
        return;
      }
      const size_t a = (size_t)req.ranges[0].first, b = (size_t)req.ranges[0].second;
      res.status = 206;
      res.set_header("Content-Range",
                     "bytes " + std::to_string(a) + "-" + std::to_string(b) + "/" + std::to_string(data_.size()));
      res.set_chunked_content_provider("application/octet-stream",
                                       [this, a, b](size_t, httplib::DataSink& sink) {
                                         sink.write(data_.data() + a, b - a + 1 + 100);
                                         sink.done();
                                         return true;
                                       });
    });
    // A redirect to a "signed" URL that stops working when the generation moves on (403).
    svr_.Get("/start.gguf", [this](const httplib::Request&, httplib::Response& res) {
      ++starts_;
      res.set_redirect("/signed-" + std::to_string(generation_.load()) + ".gguf");
    });
    svr_.Get(R"(/signed-(\d+)\.gguf)", [this](const httplib::Request& req, httplib::Response& res) {
      if (std::stoi(req.matches[1].str()) != generation_.load()) {
        res.status = 403;
        res.set_content("expired", "text/plain");
        return;
      }
      res.set_content(data_, "application/octet-stream");
    });
    port_ = svr_.bind_to_any_port("127.0.0.1");
    thread_ = std::thread([this] { svr_.listen_after_bind(); });
    while (!svr_.is_running()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ~FaultServer() {
    svr_.stop();
    thread_.join();
  }
  std::string url(const std::string& p) const { return "http://127.0.0.1:" + std::to_string(port_) + p; }
  std::atomic<int> fail_503_{0}, drops_{0}, starts_{0}, generation_{1};

 private:
  std::string data_;
  httplib::Server svr_;
  int port_ = 0;
  std::thread thread_;
};

TEST(HttpStorageFaults, RetriesServerErrorsAndReportsShortBodies) {
  const std::vector<uint8_t> bytes = read_file(kFixtures + "/qwen2-tiny.q8_0.gguf");
  FaultServer server(std::string(bytes.begin(), bytes.end()));
  ASSERT_GT(server.url("/"), "http://127.0.0.1:0");
  HttpTuning tuning;
  tuning.backoff_ms = 10;
  tuning.chunk_bytes = 32 << 10;

  // Two 503s, then success: the size probe is retried twice.
  server.fail_503_ = 2;
  StorageOptions opt;
  opt.http_retries = 4;
  opt.queue_depth = 4;  // cpp-httplib serves 8 connections at once
  {
    HttpStorage s(server.url("/flaky.gguf"), opt, tuning);
    EXPECT_EQ(s.size(), bytes.size());
    EXPECT_EQ(s.retries(), 2u);
    std::vector<uint8_t> got(bytes.size());
    const ReadRequest r{0, got.size(), got.data()};
    s.read({&r, 1});
    EXPECT_EQ(got, bytes);
  }
  // More 503s than retries: the error names the URL, the range and the status.
  server.fail_503_ = 100;
  opt.http_retries = 2;
  std::string e = error_of([&] { HttpStorage s(server.url("/flaky.gguf"), opt, tuning); });
  EXPECT_NE(e.find(server.url("/flaky.gguf")), std::string::npos) << e;
  EXPECT_NE(e.find("bytes=0-0"), std::string::npos) << e;
  EXPECT_NE(e.find("503"), std::string::npos) << e;
  EXPECT_NE(e.find("after 3 attempt"), std::string::npos) << e;
  server.fail_503_ = 0;

  // One dropped connection mid-body: retried, the bytes are right.
  {
    HttpStorage s(server.url("/drop.gguf"), opt, tuning);
    server.drops_ = 1;
    std::vector<uint8_t> got(100000);
    const ReadRequest r{1000, got.size(), got.data()};
    s.read({&r, 1});
    EXPECT_TRUE(std::equal(got.begin(), got.end(), bytes.begin() + 1000));
    EXPECT_EQ(s.retries(), 1u);
  }
  // Every body cut short: a short-body error naming the URL and range once retries run out.
  {
    HttpStorage s(server.url("/drop.gguf"), opt, tuning);
    server.drops_ = 1000;
    std::vector<uint8_t> got(5000);
    const ReadRequest r{2000, got.size(), got.data()};
    e = error_of([&] { s.read({&r, 1}); });
    EXPECT_NE(e.find(server.url("/drop.gguf")), std::string::npos) << e;
    EXPECT_NE(e.find("bytes=2000-6999"), std::string::npos) << e;
    EXPECT_NE(e.find("short body"), std::string::npos) << e;
    EXPECT_EQ(s.retries(), 2u);
  }
  // Requests go straight to the redirect target, and back through the given URL when it expires.
  {
    HttpStorage s(server.url("/start.gguf"), opt, tuning);
    EXPECT_EQ(s.size(), bytes.size());
    std::vector<uint8_t> got(bytes.size());
    const ReadRequest r{0, got.size(), got.data()};
    s.read({&r, 1});
    EXPECT_EQ(got, bytes);
    EXPECT_EQ(server.starts_.load(), 1);
    server.generation_ = 2;
    std::fill(got.begin(), got.end(), 0);
    s.read({&r, 1});
    EXPECT_EQ(got, bytes);
    EXPECT_EQ(server.starts_.load(), 1 + (int)((bytes.size() + tuning.chunk_bytes - 1) / tuning.chunk_bytes));
    s.read({&r, 1});
    EXPECT_EQ(server.starts_.load(), 1 + (int)((bytes.size() + tuning.chunk_bytes - 1) / tuning.chunk_bytes));
  }
  // A body longer than the range: refused at once, naming URL and range.
  {
    HttpStorage s(server.url("/oversized.gguf"), opt, tuning);
    std::vector<uint8_t> got(5000);
    const ReadRequest r{2000, got.size(), got.data()};
    e = error_of([&] { s.read({&r, 1}); });
    EXPECT_NE(e.find(server.url("/oversized.gguf")), std::string::npos) << e;
    EXPECT_NE(e.find("bytes=2000-6999"), std::string::npos) << e;
    EXPECT_NE(e.find("oversized body"), std::string::npos) << e;
    EXPECT_EQ(s.retries(), 0u);
  }
}

}  // namespace
