// Kernel-only timing of the packed gemm of each instruction-set table, one
// thread: a rows x cols matrix of each type (random weights, packed as the
// weight store packs them) times n_tokens quantized activation rows, the call
// a prefill of n_tokens makes for one matrix. Prints one line per (type, ISA)
// with the median time of a call and its integer multiply-adds per second,
// so the AMX tile kernel can be compared with the VNNI kernel it stands in
// for without the rest of the forward pass (attention, norms, thread pool).
// usage: spool_packed_gemm_bench [-t TOKENS=128] [-r ROWS=2048] [-c COLS=2048] [-n REPS=20]
#include <algorithm>
#include <chrono>
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
  int64_t n_tokens = 128, n_rows = 2048, n_cols = 2048;
  int reps = 20;
};

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    const long v = std::atol(argv[i + 1]);
    if (flag == "-t") o.n_tokens = v;
    else if (flag == "-r") o.n_rows = v;
    else if (flag == "-c") o.n_cols = v;
    else if (flag == "-n") o.reps = (int)std::max(1L, v);
    else {
      std::fprintf(stderr, "usage: %s [-t TOKENS] [-r ROWS] [-c COLS] [-n REPS]\n", argv[0]);
      std::exit(2);
    }
  }
  if (o.n_tokens < 1 || o.n_rows < 1 || o.n_cols < 256 || o.n_cols % 256 != 0) {
    std::fprintf(stderr, "%s: need TOKENS >= 1, ROWS >= 1 and COLS a multiple of 256 (the K-quant block)\n", argv[0]);
    std::exit(2);
  }
  return o;
}

// 64-byte aligned storage for the packed weights (the kernels load aligned).
struct Aligned {
  explicit Aligned(size_t n) : p(static_cast<uint8_t*>(std::aligned_alloc(64, (n + 63) / 64 * 64))) {}
  ~Aligned() { std::free(p); }
  uint8_t* p;
};

void bench(const Options& o, DType t, Isa isa) {
  const KernelTable* table = kernels_for(isa);
  if (!table) return;
  const PackedKernels& pk = table->types[(uint32_t)t].packed;
  if (!pk.gemm) return;
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> wf(o.n_rows * o.n_cols), xf(o.n_tokens * o.n_cols);
  for (float& v : wf) v = normal(rng);
  for (float& v : xf) v = normal(rng);
  const TypeKernels& ref = kernels_for(Isa::Scalar)->types[(uint32_t)t];
  const size_t rb = row_bytes(t, o.n_cols);
  std::vector<uint8_t> wq(rb * o.n_rows);
  for (int64_t r = 0; r < o.n_rows; ++r) ref.quantize(wf.data() + r * o.n_cols, wq.data() + r * rb, o.n_cols);
  Aligned packed(pk.packed_bytes(o.n_rows, o.n_cols));
  pk.pack(wq.data(), rb, o.n_rows, o.n_cols, packed.p);
  const size_t as = pk.act_bytes(o.n_cols);
  Aligned act(as * o.n_tokens);
  for (int64_t j = 0; j < o.n_tokens; ++j) pk.quantize_act(xf.data() + j * o.n_cols, act.p + j * as, o.n_cols);
  std::vector<float> c(o.n_tokens * o.n_rows);
  std::vector<double> us;
  for (int i = 0; i < o.reps + 2; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    pk.gemm(o.n_cols, packed.p, o.n_rows, act.p, as, o.n_tokens, c.data(), o.n_rows);
    const auto t1 = std::chrono::steady_clock::now();
    if (i >= 2) us.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
  }
  std::sort(us.begin(), us.end());
  const double med = us[us.size() / 2];
  double check = 0;
  for (float v : c) check += v;
  std::printf("%-6s %-7s tokens %4lld  %lldx%lld  median %9.1f us  min %9.1f us  %7.1f G mul-add/s  (sum %.3g)\n",
              dtype_name(t), isa_name(isa), (long long)o.n_tokens, (long long)o.n_rows, (long long)o.n_cols, med,
              us.front(), (double)o.n_tokens * o.n_rows * o.n_cols / med * 1e-3, check);
}

}  // namespace

int main(int argc, char** argv) {
  const Options o = parse(argc, argv);
  for (DType t : {DType::Q4_0, DType::Q8_0, DType::Q4_K, DType::Q6_K}) {
    for (Isa isa : {Isa::Avx2, Isa::Avx512, Isa::Amx}) bench(o, t, isa);
  }
  return 0;
}
