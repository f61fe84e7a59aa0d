// Expert parallelism over a Communicator; see dist/expert_dist.h.
// Messages (little-endian, as this host writes them):
//   work   : u32 kWork, i32 layer, i32 width, i32 n_jobs, n_jobs x (i32 expert, i32 rows), f32 rows x width
//   answer : u32 kAnswer, f32 rows x width (the jobs' outputs, in order), RankStats (6 x u64)
//   error  : u32 kError, the text
//   ready  : u32 kReady;  stop : u32 kStop
#include "dist/expert_dist.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <map>

#include "core/error.h"
#include "model/model.h"
#include "model/moe.h"

namespace spool::dist {

namespace {

enum : uint32_t { kWork = 1, kAnswer = 2, kError = 3, kReady = 4, kStop = 5 };

void put(std::vector<uint8_t>& m, const void* p, size_t n) {
  const auto* b = static_cast<const uint8_t*>(p);
  m.insert(m.end(), b, b + n);
}
void put_u32(std::vector<uint8_t>& m, uint32_t v) { put(m, &v, 4); }

struct Reader {
  const std::vector<uint8_t>& m;
  size_t at = 0;
  void get(void* p, size_t n) {
    if (at + n > m.size()) throw Error("expert parallelism: a message of " + std::to_string(m.size()) + " bytes ends early");
    std::memcpy(p, m.data() + at, n);
    at += n;
  }
  uint32_t u32() {
    uint32_t v;
    get(&v, 4);
    return v;
  }
  int32_t i32() { return (int32_t)u32(); }
};

std::vector<uint8_t> one_word(uint32_t kind) {
  std::vector<uint8_t> m;
  put_u32(m, kind);
  return m;
}

std::vector<uint8_t> error_message(const std::string& text) {
  std::vector<uint8_t> m = one_word(kError);
  put(m, text.data(), text.size());
  return m;
}

double seconds_now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

std::string rank_name(const Communicator& comm, int r) {
  return "rank " + std::to_string(r) + " (" + comm.host(r) + ")";
}

}  // namespace

int expert_owner(int layer, int expert, int n_ranks) {
  if (n_ranks <= 1) return 0;
  return (int)(((int64_t)expert + (layer < 0 ? 0 : layer)) % n_ranks);
}

std::vector<int> place_jobs(int layer, const std::vector<ExpertJob>& jobs, int n_ranks,
                            const PlacementCosts& costs) {
  std::vector<int> rank(jobs.size(), 0);
  if (n_ranks <= 1) return rank;
  std::vector<double> load((size_t)n_ranks, 0.0);
  load[0] = costs.home_rows;
  auto cost = [&](size_t i) { return costs.read_rows + jobs[i].rows; };
  for (size_t i = 0; i < jobs.size(); ++i) {
    rank[i] = expert_owner(layer, jobs[i].expert, n_ranks);
    load[rank[i]] += cost(i);
  }
  // Each move lowers the sum of the squared loads, so this ends; the bound is a guard.
  for (size_t step = 0; step < 4 * jobs.size() + 4; ++step) {
    int hi = 0, lo = 0;
    for (int r = 1; r < n_ranks; ++r) {
      if (load[r] > load[hi]) hi = r;
      if (load[r] < load[lo]) lo = r;
    }
    size_t best = jobs.size();
    double best_gap = 0;
    for (size_t i = 0; i < jobs.size(); ++i) {
      if (rank[i] != hi || load[lo] + cost(i) >= load[hi]) continue;  // the move must lower the larger load
      const double gap = std::abs((load[hi] - cost(i)) - (load[lo] + cost(i)));
      if (best == jobs.size() || gap < best_gap) best = i, best_gap = gap;
    }
    if (best == jobs.size()) break;
    rank[best] = lo;
    load[hi] -= cost(best);
    load[lo] += cost(best);
  }
  return rank;
}

void stop_all(Communicator& comm) {
  for (int r = 1; r < comm.size(); ++r) comm.send(r, one_word(kStop));
}

HomeExperts::HomeExperts(Communicator& comm) : comm_(comm), ranks_((size_t)comm.size()) {
  std::string failed;
  for (int r = 1; r < comm_.size(); ++r) {
    const std::vector<uint8_t> m = comm_.recv(r);
    Reader rd{m};
    const uint32_t kind = rd.u32();
    if (kind == kReady) continue;
    const std::string why = kind == kError ? std::string(m.begin() + 4, m.end()) : "an unexpected message";
    if (failed.empty()) failed = rank_name(comm_, r) + " could not load the model: " + why;
  }
  if (!failed.empty()) {
    stop();
    throw Error("--dist ep: " + failed);
  }
}

HomeExperts::~HomeExperts() {
  try {
    stop();
  } catch (...) {
  }
}

void HomeExperts::stop() {
  if (stopped_) return;
  stopped_ = true;
  stop_all(comm_);
}

void HomeExperts::place(int layer, const std::vector<ExpertJob>& jobs, std::vector<uint8_t>& here) {
  const int n = comm_.size();
  const std::vector<int> rank = place_jobs(layer, jobs, n, costs_);
  here.assign(jobs.size(), 0);
  std::lock_guard<std::mutex> lock(stats_mu_);
  for (size_t i = 0; i < jobs.size(); ++i) {
    const int e = jobs[i].expert;
    if (e < 0) throw Error("expert parallelism: expert " + std::to_string(e));
    if ((size_t)e >= rank_of_.size()) rank_of_.resize((size_t)e + 1, -1);
    rank_of_[e] = rank[i];
    here[i] = rank[i] == 0;
    ++traffic_.jobs;
    traffic_.jobs_moved += rank[i] != expert_owner(layer, e, n);
    traffic_.jobs_home += rank[i] == 0;
  }
}

void HomeExperts::submit(int layer, int width, const std::vector<ExpertJob>& jobs, const float* input) {
  const int n = comm_.size();
  std::vector<std::vector<size_t>> mine(n);  // job indices per rank
  std::vector<size_t> offset(jobs.size());
  size_t rows = 0;
  for (size_t i = 0; i < jobs.size(); ++i) {
    offset[i] = rows;
    rows += jobs[i].rows;
    const int e = jobs[i].expert;
    const int r = e >= 0 && (size_t)e < rank_of_.size() ? rank_of_[e] : -1;
    if (r <= 0 || r >= n)
      throw Error("expert parallelism: expert " + std::to_string(e) + " of layer " + std::to_string(layer) +
                  " was not placed on another rank");
    mine[r].push_back(i);
  }
  asked_.clear();
  placement_.clear();
  pending_rows_ = rows;
  pending_width_ = width;
  submitted_at_ = seconds_now();
  for (int r = 1; r < n; ++r) {
    if (mine[r].empty()) continue;
    std::vector<uint8_t> m = one_word(kWork);
    put_u32(m, (uint32_t)layer);
    put_u32(m, (uint32_t)width);
    put_u32(m, (uint32_t)mine[r].size());
    size_t r_rows = 0;
    std::vector<std::pair<size_t, int32_t>> place;
    for (size_t i : mine[r]) {
      put_u32(m, (uint32_t)jobs[i].expert);
      put_u32(m, (uint32_t)jobs[i].rows);
      place.push_back({offset[i], jobs[i].rows});
      r_rows += jobs[i].rows;
    }
    m.reserve(m.size() + r_rows * width * sizeof(float));
    for (size_t i : mine[r]) put(m, input + offset[i] * width, (size_t)jobs[i].rows * width * sizeof(float));
    comm_.send(r, m);
    asked_.push_back(r);
    placement_.push_back(std::move(place));
    std::lock_guard<std::mutex> lock(stats_mu_);
    ++traffic_.messages;
    traffic_.bytes_sent += m.size();
  }
}

void HomeExperts::collect(std::vector<float>& output) {
  const double t0 = seconds_now();
  output.resize(pending_rows_ * pending_width_);
  std::string failed;
  uint64_t received = 0;
  double slowest = 0;  // the longest compute time among the answers, seconds
  std::vector<std::pair<int, RankStats>> reports;
  for (size_t a = 0; a < asked_.size(); ++a) {
    const int r = asked_[a];
    const std::vector<uint8_t> m = comm_.recv(r);
    received += m.size();
    Reader rd{m};
    const uint32_t kind = rd.u32();
    if (kind != kAnswer) {
      const std::string why = kind == kError ? std::string(m.begin() + 4, m.end()) : "an unexpected message";
      if (failed.empty()) failed = rank_name(comm_, r) + ": " + why;
      continue;
    }
    for (const auto& [at, rows] : placement_[a]) rd.get(output.data() + at * pending_width_, (size_t)rows * pending_width_ * sizeof(float));
    RankStats st;
    rd.get(&st, sizeof st);
    if (rd.at != m.size()) failed = rank_name(comm_, r) + ": an answer of the wrong size";
    reports.push_back({r, st});
  }
  const double t1 = seconds_now();
  {
    std::lock_guard<std::mutex> lock(stats_mu_);
    for (const auto& [r, st] : reports) {
      slowest = std::max(slowest, (st.compute_ns - std::min(st.compute_ns, ranks_[r].compute_ns)) / 1e9);
      ranks_[r] = st;
    }
    traffic_.bytes_received += received;
    if (!asked_.empty()) {
      ++traffic_.passes;
      traffic_.wait_seconds += t1 - t0;
      // The wait beyond what the slowest rank's compute explains: transport (the answers could have
      // been in at submit + slowest; waiting only began at t0).
      traffic_.network_seconds += std::clamp(t1 - std::max(t0, submitted_at_ + slowest), 0.0, t1 - t0);
    }
  }
  asked_.clear();
  if (!failed.empty()) throw Error("--dist ep: " + failed);
}

ExpertParallelStats HomeExperts::stats() const {
  std::lock_guard<std::mutex> lock(stats_mu_);
  ExpertParallelStats s = traffic_;
  s.ranks = comm_.size();
  for (int r = 1; r < comm_.size(); ++r) {
    const RankStats& x = ranks_[r];
    s.rank.push_back({r, comm_.host(r), x.answers, x.bytes_read, x.lookups, x.hits, x.io_wait_ns / 1e9,
                      x.compute_ns / 1e9});
  }
  return s;
}

void serve_experts(Model* model, Communicator& comm, const std::string& load_error) {
  comm.send(0, model ? one_word(kReady) : error_message(load_error.empty() ? "no model" : load_error));
  std::map<int, MoeLayerWeights> layers;
  MoeScratch scratch;
  RankStats mine;
  std::vector<float> input, output;
  for (;;) {
    const std::vector<uint8_t> m = comm.recv(0);
    Reader rd{m};
    const uint32_t kind = rd.u32();
    if (kind == kStop) return;
    try {
      if (kind != kWork) throw Error("unexpected message " + std::to_string(kind));
      if (!model) throw Error("no model loaded");
      const int layer = rd.i32(), width = rd.i32(), n_jobs = rd.i32();
      if (width <= 0 || n_jobs < 0 || n_jobs > model->config().n_expert)
        throw Error("a bad work message (width " + std::to_string(width) + ", " + std::to_string(n_jobs) + " jobs)");
      std::vector<ExpertJob> jobs((size_t)n_jobs);
      size_t rows = 0;
      for (ExpertJob& j : jobs) {
        j.expert = rd.i32();
        j.rows = rd.i32();
        if (j.rows <= 0) throw Error("a job of no rows");
        rows += (size_t)j.rows;
      }
      input.resize(rows * width);
      rd.get(input.data(), input.size() * sizeof(float));
      auto it = layers.find(layer);
      if (it == layers.end()) {
        ModelConfig c = model->config();
        c.n_expert_shared = 0;  // the shared experts stay on the home rank
        it = layers.emplace(layer, load_moe_weights(model->weights().manifest(), "blk." + std::to_string(layer) + ".", c)).first;
      }
      const int d = model->config().n_embd_exp > 0 ? model->config().n_embd_exp : model->config().n_embd;
      if (width != d) throw Error("rows of " + std::to_string(width) + " floats, the experts take " + std::to_string(d));
      output.resize(rows * width);
      const auto t0 = std::chrono::steady_clock::now();
      run_routed_experts(model->weights(), model->pool(), model->config(), it->second, jobs, input.data(), width,
                         output.data(), scratch);
      mine.compute_ns +=
          (uint64_t)std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0).count();
      ++mine.answers;
      const StoreStats st = model->weights().stats_snapshot();
      mine.bytes_read = st.bytes_read;
      mine.lookups = st.lookups();
      mine.hits = st.hits_total();
      mine.io_wait_ns = st.io_wait_ns;
      std::vector<uint8_t> answer = one_word(kAnswer);
      put(answer, output.data(), output.size() * sizeof(float));
      put(answer, &mine, sizeof mine);
      comm.send(0, answer);
    } catch (const std::exception& e) {
      comm.send(0, error_message(e.what()));
    }
  }
}

}  // namespace spool::dist
