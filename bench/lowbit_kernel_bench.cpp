// Kernel-only decode timing of the quantized types without a packed layout
// (the IQ, TQ and Q1_0/Q2_0 families), one thread, one token: a rows x cols
// matrix of random weights quantized by the scalar reference, times one
// activation row in the type's vec_dot_type, through spool's gemm_tile for
// each instruction-set table. With --peer, the same bytes also go through
// llama.cpp's CPU vec_dot (ggml_get_type_traits_cpu from a libggml-cpu.so
// built outside the repo; the block layouts are the same file format), the
// two timed alternately so that the machine's drift falls on both; their
// results must agree. Prints, per (type, ISA), the median time of a call and
// spool's speed over the peer's. The end-to-end decode figures come from
// bench/compare_llamacpp.sh; this isolates the matmul kernel from the rest.
// usage: spool_lowbit_kernel_bench [--peer LIBGGML_CPU_SO] [--isa avx2|avx512|all]
//        [-r ROWS=5632] [-c COLS=2048] [-n REPS=30] TYPE...
#include <dlfcn.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kernels/kernels.h"

using namespace spool;

namespace {

struct Options {
  int64_t n_rows = 5632, n_cols = 2048;
  int reps = 30;
  std::string peer, isa = "all";
  std::vector<DType> types;
};

[[noreturn]] void usage(const char* argv0) {
  std::fprintf(stderr,
               "usage: %s [--peer LIBGGML_CPU_SO] [--isa avx2|avx512|all] [-r ROWS] [-c COLS] [-n REPS] TYPE...\n",
               argv0);
  std::exit(2);
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const bool has_value = i + 1 < argc;
    if (a == "--peer" && has_value) o.peer = argv[++i];
    else if (a == "--isa" && has_value) o.isa = argv[++i];
    else if (a == "-r" && has_value) o.n_rows = std::atol(argv[++i]);
    else if (a == "-c" && has_value) o.n_cols = std::atol(argv[++i]);
    else if (a == "-n" && has_value) o.reps = std::max(1, std::atoi(argv[++i]));
    else if (auto t = dtype_from_name(a)) o.types.push_back(*t);
    else {
      std::fprintf(stderr, "%s: unknown argument or type '%s'\n", argv[0], a.c_str());
      usage(argv[0]);
    }
  }
  if (o.types.empty() || o.n_rows < 1 || o.n_cols < 256 || o.n_cols % 256 != 0) usage(argv[0]);
  return o;
}

// llama.cpp's CPU type traits, as its ggml-cpu.h declares them.
using PeerVecDot = void (*)(int n, float* s, size_t bs, const void* x, size_t bx, const void* y, size_t by, int nrc);
struct PeerTraits {
  void* from_float;
  PeerVecDot vec_dot;
  int vec_dot_type;
  int64_t nrows;
};
struct Peer {
  const PeerTraits* (*traits)(int type) = nullptr;
};

Peer load_peer(const std::string& path) {
  Peer p;
  if (path.empty()) return p;
  void* h = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    std::fprintf(stderr, "cannot load %s: %s\n", path.c_str(), dlerror());
    std::exit(1);
  }
  auto init = reinterpret_cast<void (*)()>(dlsym(h, "ggml_cpu_init"));
  p.traits = reinterpret_cast<const PeerTraits* (*)(int)>(dlsym(h, "ggml_get_type_traits_cpu"));
  if (!init || !p.traits) {
    std::fprintf(stderr, "%s lacks ggml_cpu_init / ggml_get_type_traits_cpu\n", path.c_str());
    std::exit(1);
  }
  init();
  return p;
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

void bench(const Options& o, const Peer& peer, DType t, Isa isa) {
  const KernelTable* table = kernels_for(isa);
  if (!table) return;
  const TypeKernels& k = table->types[(uint32_t)t];
  const TypeKernels& ref = kernels_for(Isa::Scalar)->types[(uint32_t)t];
  const DType at = dtype_traits(t).vec_dot_type;
  if (!k.gemm_tile || !ref.quantize || !table->types[(uint32_t)at].quantize) return;
  std::mt19937 rng(11);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const size_t rb = row_bytes(t, o.n_cols), ab = row_bytes(at, o.n_cols);
  std::vector<float> row(o.n_cols), x(o.n_cols);
  std::vector<uint8_t> w(rb * o.n_rows), a(ab);
  for (int64_t r = 0; r < o.n_rows; ++r) {
    for (float& v : row) v = normal(rng);
    ref.quantize(row.data(), w.data() + r * rb, o.n_cols);
  }
  for (float& v : x) v = normal(rng);
  table->types[(uint32_t)at].quantize(x.data(), a.data(), o.n_cols);

  const PeerTraits* pt = peer.traits ? peer.traits((int)t) : nullptr;
  if (pt && (!pt->vec_dot || pt->vec_dot_type != (int)at)) pt = nullptr;
  std::vector<float> cs(o.n_rows), cp(o.n_rows);
  std::vector<double> ts, tp;
  for (int i = 0; i < o.reps + 2; ++i) {
    auto t0 = std::chrono::steady_clock::now();
    k.gemm_tile(o.n_cols, w.data(), rb, (int)o.n_rows, a.data(), ab, 1, cs.data(), o.n_rows);
    if (i >= 2) ts.push_back(seconds_since(t0));
    if (!pt) continue;
    t0 = std::chrono::steady_clock::now();
    for (int64_t r = 0; r < o.n_rows; ++r) pt->vec_dot((int)o.n_cols, &cp[r], 0, w.data() + r * rb, 0, a.data(), 0, 1);
    if (i >= 2) tp.push_back(seconds_since(t0));
  }
  const double ms = median(ts) * 1e3;
  const double gbs = (double)w.size() / (ms * 1e-3) * 1e-9;
  std::printf("%-8s %-7s %lldx%lld  spool %8.3f ms  %6.2f GB/s", dtype_name(t), isa_name(isa), (long long)o.n_rows,
              (long long)o.n_cols, ms, gbs);
  if (pt) {
    double worst = 0, scale = 0;
    for (int64_t r = 0; r < o.n_rows; ++r) scale = std::max(scale, (double)std::fabs(cp[r]));
    for (int64_t r = 0; r < o.n_rows; ++r) worst = std::max(worst, (double)std::fabs(cs[r] - cp[r]));
    const double mp = median(tp) * 1e3;
    std::printf("  peer %8.3f ms  spool/peer speed %.3f  max |diff| %.2g of %.3g", mp, mp / ms, worst, scale);
    if (worst > 1e-3 * scale) std::printf("  MISMATCH");
  }
  std::printf("\n");
}

}  // namespace

int main(int argc, char** argv) {
  const Options o = parse(argc, argv);
  const Peer peer = load_peer(o.peer);
  for (DType t : o.types)
    for (Isa isa : {Isa::Avx2, Isa::Avx512})
      if (o.isa == "all" || o.isa == isa_name(isa)) bench(o, peer, t, isa);
  return 0;
}
