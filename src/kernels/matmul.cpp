// matmul(): converts the activations once to the weight type's vec_dot_type,
// then splits the output into tasks of whole row chunks (and token chunks for
// big batches) over the thread pool, all through gemm_tile. A single token
// (decode, bound by streaming the weights) is a tile with one activation row,
// which a kernel may run as vec_dot per row or as several rows at once; with
// several tokens each weight block loaded is reused for several (prefill).
#include "kernels/matmul.h"

#include <algorithm>

#include "core/error.h"
#include "core/thread_pool.h"
#include "kernels/kernels.h"

namespace spool {
namespace {

// Rows per task: big enough to amortise task overhead, small enough that
// there are several tasks per thread for balance. Multiple of 16 so SIMD
// tiles see full micro-tiles except at the very end.
int64_t rows_per_task(int64_t n_rows, int n_threads) {
  int64_t chunk = n_rows / ((int64_t)n_threads * 8);
  chunk = std::clamp<int64_t>(chunk, 16, 128);
  return (chunk + 15) / 16 * 16;
}

// Activation rows in vec_dot_type; returns a pointer to row 0.
const uint8_t* convert_activations(ThreadPool& pool, const KernelTable& k, DType vdt,
                                   const float* x, int64_t n_cols, int64_t n_tokens,
                                   size_t a_stride, std::vector<uint8_t>& scratch) {
  if (vdt == DType::F32) return reinterpret_cast<const uint8_t*>(x);
  scratch.resize(a_stride * n_tokens);
  const QuantizeRowFn quantize = k[vdt].quantize;
  uint8_t* base = scratch.data();
  if (n_tokens * n_cols < 64 * 1024) {
    for (int64_t t = 0; t < n_tokens; ++t) quantize(x + t * n_cols, base + t * a_stride, n_cols);
  } else {
    pool.run(n_tokens, [&](int64_t t, int) { quantize(x + t * n_cols, base + t * a_stride, n_cols); });
  }
  return base;
}

// The packed path: activations converted by the type's quantize_act, then
// tasks of whole row groups, each over every token (the group's weights stay
// in cache while the activation tiles stream past). Several matrices that
// read the same input (Q/K/V, gate/up) share one conversion per activation
// format and one pool job, so a decode step pays one barrier for them all.
struct PackedJob {
  const PackedKernels* pk;
  const MatView* w;
  float* y;
  const uint8_t* act = nullptr;  // converted activations (shared by jobs of one format)
  int64_t groups_per_task = 0, n_tasks = 0;
};

void convert_packed_activations(ThreadPool& pool, const PackedKernels& pk, const float* x, int64_t n_cols,
                                int64_t n_tokens, uint8_t* act) {
  const size_t as = pk.act_bytes(n_cols);
  auto convert = [&](int64_t t, int) { pk.quantize_act(x + t * n_cols, act + t * as, n_cols); };
  if (n_tokens * n_cols < 64 * 1024) {
    for (int64_t t = 0; t < n_tokens; ++t) convert(t, 0);
  } else {
    pool.run(n_tokens, convert);
  }
}

constexpr int kMaxPackedJobs = 8;  // matrices one matmul_many call may share a job between

// jobs[0 .. n_jobs): no heap allocation here, this runs several times per layer per token.
void run_packed_jobs(ThreadPool& pool, PackedJob* jobs, int n_jobs, const float* x, int64_t n_tokens,
                     std::vector<uint8_t>& scratch) {
  // One converted copy per distinct activation format: jobs with the same
  // quantize_act point at the first such job's copy.
  size_t offset[kMaxPackedJobs];
  int owner[kMaxPackedJobs];
  size_t total = 0;
  for (int i = 0; i < n_jobs; ++i) {
    owner[i] = i;
    for (int j = 0; j < i; ++j)
      if (jobs[j].pk->quantize_act == jobs[i].pk->quantize_act) { owner[i] = j; break; }
    offset[i] = owner[i] == i ? total : offset[owner[i]];
    if (owner[i] == i) total += jobs[i].pk->act_bytes(jobs[i].w->n_cols) * n_tokens;
  }
  scratch.resize(total);
  for (int i = 0; i < n_jobs; ++i) {
    if (owner[i] == i)
      convert_packed_activations(pool, *jobs[i].pk, x, jobs[i].w->n_cols, n_tokens, scratch.data() + offset[i]);
  }
  // Decode: several tasks per thread for balance. Prefill: fewer, bigger
  // tasks (each costs a pass over all activations), but every thread busy.
  const int64_t tasks_wanted = (int64_t)pool.size() * (n_tokens == 1 ? 8 : 4);
  int64_t all_tasks = 0;
  for (int i = 0; i < n_jobs; ++i) {
    PackedJob& jb = jobs[i];
    jb.act = scratch.data() + offset[i];
    const int64_t n_groups = (jb.w->n_rows + jb.pk->rows - 1) / jb.pk->rows;
    jb.groups_per_task = std::max<int64_t>(1, n_groups / tasks_wanted);
    jb.n_tasks = (n_groups + jb.groups_per_task - 1) / jb.groups_per_task;
    all_tasks += jb.n_tasks;
  }
  pool.run(all_tasks, [&](int64_t task, int) {
    int i = 0;
    while (task >= jobs[i].n_tasks) task -= jobs[i++].n_tasks;
    const PackedJob& jb = jobs[i];
    const PackedKernels& pk = *jb.pk;
    const int64_t n_rows = jb.w->n_rows, n_cols = jb.w->n_cols;
    const size_t group_bytes = pk.packed_bytes(pk.rows, n_cols);
    const int64_t g0 = task * jb.groups_per_task, r0 = g0 * pk.rows;
    const int64_t nr = std::min(n_rows, (g0 + jb.groups_per_task) * pk.rows) - r0;
    pk.gemm(n_cols, static_cast<const uint8_t*>(jb.w->packed) + g0 * group_bytes, nr, jb.act,
            pk.act_bytes(n_cols), n_tokens, jb.y + r0, (size_t)n_rows);
  });
}

void matmul_packed(ThreadPool& pool, const PackedKernels& pk, const MatView& w, const float* x,
                   int64_t n_tokens, float* y, std::vector<uint8_t>& scratch) {
  PackedJob job{&pk, &w, y};
  run_packed_jobs(pool, &job, 1, x, n_tokens, scratch);
}

// Block-scaled weights (F8_E4M3 with a scale grid), float activations. One
// token: the fused decode-and-dot kernel per row (batch-invariant mode sends
// it here as two tokens, so it takes the batched path). More: groups
// of rows are decoded into a float scratch once and go through the F32 tile,
// so each row is decoded once per call whatever the batch size.
void matmul_scaled(ThreadPool& pool, const KernelTable& k, const MatView& w, const float* x, int64_t n_tokens,
                   float* y) {
  const ScaledKernels& sk = k[w.type].scaled;
  if (!sk.dot || w.block_cols <= 0 || w.block_rows <= 0)
    throw Error(std::string("matmul: no block-scaled kernel or block shape for ") + dtype_name(w.type));
  const int64_t n_rows = w.n_rows, n_cols = w.n_cols, bc = w.block_cols;
  const size_t w_stride = w.row_stride();
  const auto* wdata = static_cast<const uint8_t*>(w.data);
  const int64_t row_chunk = rows_per_task(n_rows, pool.size());
  const int64_t n_row_chunks = (n_rows + row_chunk - 1) / row_chunk;
  if (n_tokens == 1) {
    pool.run(n_row_chunks, [&](int64_t task, int) {
      const int64_t r_end = std::min(n_rows, (task + 1) * row_chunk);
      for (int64_t r = task * row_chunk; r < r_end; ++r)
        for (int64_t t = 0; t < n_tokens; ++t)
          y[t * n_rows + r] = sk.dot(n_cols, wdata + r * w_stride, w.row_scales(r), bc, x + t * n_cols);
    });
    return;
  }
  const GemmTileFn tile = k[DType::F32].gemm_tile;
  const size_t f_stride = (size_t)n_cols * sizeof(float);
  // Rows decoded at a time: a scratch of at most ~256 KiB, 1..16 rows.
  const int64_t group = std::clamp<int64_t>((256 << 10) / (int64_t)f_stride, 1, 16);
  constexpr int64_t kTokenChunk = 64;
  pool.run(n_row_chunks, [&](int64_t task, int) {
    thread_local std::vector<float> buf;
    buf.resize((size_t)group * n_cols);
    const int64_t r_end = std::min(n_rows, (task + 1) * row_chunk);
    for (int64_t r0 = task * row_chunk; r0 < r_end; r0 += group) {
      const int64_t nr = std::min(group, r_end - r0);
      for (int64_t i = 0; i < nr; ++i)
        sk.dequantize(n_cols, wdata + (r0 + i) * w_stride, w.row_scales(r0 + i), bc, buf.data() + i * n_cols);
      for (int64_t t0 = 0; t0 < n_tokens; t0 += kTokenChunk) {
        const int64_t nc = std::min(kTokenChunk, n_tokens - t0);
        tile(n_cols, buf.data(), f_stride, (int)nr, x + t0 * n_cols, f_stride, (int)nc, y + t0 * n_rows + r0,
             (size_t)n_rows);
      }
    }
  });
}

}  // namespace

MatView row_slice(const MatView& w, int64_t row0, int64_t n_rows) {
  SPOOL_CHECK(row0 >= 0 && row0 + n_rows <= w.n_rows);
  MatView m = w;
  m.data = static_cast<const uint8_t*>(w.data) + row0 * w.row_stride();
  m.n_rows = n_rows;
  m.packed = nullptr;
  m.scale_row0 = w.scale_row0 + row0;
  return m;
}

size_t packed_matrix_bytes(const MatView& w) {
  if (w.block_scale) return 0;
  const PackedKernels& pk = kernels()[w.type].packed;
  if (pk.rows == 0 || w.n_cols % dtype_traits(w.type).block_size != 0) return 0;
  return pk.packed_bytes(w.n_rows, w.n_cols);
}

void pack_matrix(const MatView& w, void* out, ThreadPool* pool) {
  const PackedKernels& pk = kernels()[w.type].packed;
  SPOOL_CHECK(pk.rows > 0);
  const int64_t n_groups = (w.n_rows + pk.rows - 1) / pk.rows;
  const size_t group_bytes = pk.packed_bytes(pk.rows, w.n_cols);
  auto pack_group = [&](int64_t g, int) {
    const int64_t r0 = g * pk.rows, nr = std::min<int64_t>(pk.rows, w.n_rows - r0);
    pk.pack(static_cast<const uint8_t*>(w.data) + r0 * w.row_stride(), w.row_stride(), nr, w.n_cols,
            static_cast<uint8_t*>(out) + g * group_bytes);
  };
  if (pool) {
    pool->run(n_groups, pack_group);
  } else {
    for (int64_t g = 0; g < n_groups; ++g) pack_group(g, 0);
  }
}

namespace {
thread_local bool tl_batch_invariant = false;
}  // namespace

void set_matmul_batch_invariant(bool on) { tl_batch_invariant = on; }
bool matmul_batch_invariant() { return tl_batch_invariant; }

void matmul(ThreadPool& pool, const MatView& w, const float* x, int64_t n_tokens, float* y,
            std::vector<uint8_t>& scratch) {
  const DTypeTraits& tr = dtype_traits(w.type);
  SPOOL_CHECK(w.n_cols % tr.block_size == 0);
  if (n_tokens <= 0 || w.n_rows <= 0) return;
  const KernelTable& k = kernels();
  const bool packed = w.packed && k[w.type].packed.rows > 0;
  if (n_tokens == 1 && tl_batch_invariant && !packed) {
    // Two copies of the row take the batched kernels; keep the first result.
    // (The packed kernels need no such detour: a tile computes each of its
    // rows with the same instructions in the same order whatever its width.)
    thread_local std::vector<float> x2, y2;
    x2.resize(2 * w.n_cols);
    y2.resize(2 * w.n_rows);
    std::copy(x, x + w.n_cols, x2.begin());
    std::copy(x, x + w.n_cols, x2.begin() + w.n_cols);
    tl_batch_invariant = false;  // (no recursion into this branch)
    matmul(pool, w, x2.data(), 2, y2.data(), scratch);
    tl_batch_invariant = true;
    std::copy(y2.begin(), y2.begin() + w.n_rows, y);
    return;
  }
  if (w.block_scale) {
    matmul_scaled(pool, k, w, x, n_tokens, y);
    return;
  }
  if (!k[w.type].gemm_tile)
    throw Error(std::string("matmul: weights of type ") + dtype_name(w.type) + " need their block scales");
  if (packed) {
    matmul_packed(pool, k[w.type].packed, w, x, n_tokens, y, scratch);
    return;
  }
  const DType vdt = tr.vec_dot_type;
  const size_t a_stride = row_bytes(vdt, w.n_cols), w_stride = w.row_stride();
  const uint8_t* act = convert_activations(pool, k, vdt, x, w.n_cols, n_tokens, a_stride, scratch);
  const auto* wdata = static_cast<const uint8_t*>(w.data);
  const int64_t n_rows = w.n_rows, n_cols = w.n_cols;
  const int64_t row_chunk = rows_per_task(n_rows, pool.size());
  const int64_t n_row_chunks = (n_rows + row_chunk - 1) / row_chunk;

  const GemmTileFn tile = k[w.type].gemm_tile;
  if (n_tokens == 1) {
    // A tile with one activation row is vec_dot over several weight rows at
    // once: the activation-side work is shared and the rows stream together.
    pool.run(n_row_chunks, [&](int64_t task, int) {
      const int64_t r0 = task * row_chunk, nr = std::min(n_rows, r0 + row_chunk) - r0;
      tile(n_cols, wdata + r0 * w_stride, w_stride, (int)nr, act, a_stride, 1, y + r0, (size_t)n_rows);
    });
    return;
  }

  // Tokens are processed in chunks inside a task so the task's weight rows
  // stay in cache across them; when there are too few row chunks to keep
  // every thread busy, token chunks become separate tasks too.
  constexpr int64_t kTokenChunk = 64;
  int64_t n_token_tasks = 1;
  while (n_row_chunks * n_token_tasks < 4 * pool.size() &&
         (n_tokens + n_token_tasks * 2 - 1) / (n_token_tasks * 2) >= 4) {
    n_token_tasks *= 2;
  }
  const int64_t tokens_per_task = (n_tokens + n_token_tasks - 1) / n_token_tasks;
  const bool invariant = tl_batch_invariant;  // (the tasks run on other threads)
  pool.run(n_row_chunks * n_token_tasks, [&](int64_t task, int) {
    const int64_t rc = task % n_row_chunks, tc = task / n_row_chunks;
    const int64_t r0 = rc * row_chunk, nr = std::min(n_rows, r0 + row_chunk) - r0;
    const int64_t t_end = std::min(n_tokens, (tc + 1) * tokens_per_task);
    for (int64_t t0 = tc * tokens_per_task; t0 < t_end; t0 += kTokenChunk) {
      const int64_t nc = std::min(kTokenChunk, t_end - t0);
      if (nc == 1 && invariant) {
        // A lone trailing token would take the per-row kernel: run it with
        // the token before it through the batched one and keep its row.
        float tmp[2 * 128];
        tile(n_cols, wdata + r0 * w_stride, w_stride, (int)nr, act + (t0 - 1) * a_stride, a_stride, 2, tmp,
             (size_t)nr);
        std::copy(tmp + nr, tmp + 2 * nr, y + t0 * n_rows + r0);
        continue;
      }
      tile(n_cols, wdata + r0 * w_stride, w_stride, (int)nr, act + t0 * a_stride, a_stride,
           (int)nc, y + t0 * n_rows + r0, (size_t)n_rows);
    }
  });
}

void matmul_many(ThreadPool& pool, const MatView* const* w, float* const* y, int n_mats, const float* x,
                 int64_t n_tokens, std::vector<uint8_t>& scratch) {
  if (n_tokens <= 0) return;
  const KernelTable& k = kernels();
  SPOOL_CHECK(n_mats <= kMaxPackedJobs);
  PackedJob jobs[kMaxPackedJobs];
  int n_jobs = 0;
  for (int i = 0; i < n_mats; ++i) {
    const bool packed = w[i]->packed && k[w[i]->type].packed.rows > 0 && !w[i]->block_scale;
    SPOOL_CHECK(w[i]->n_cols == w[0]->n_cols);
    if (packed && w[i]->n_rows > 0) {
      jobs[n_jobs++] = PackedJob{&k[w[i]->type].packed, w[i], y[i]};
    } else {
      matmul(pool, *w[i], x, n_tokens, y[i], scratch);
    }
  }
  if (n_jobs > 0) run_packed_jobs(pool, jobs, n_jobs, x, n_tokens, scratch);
}

void matmul_pair(ThreadPool& pool, const MatView& a, const MatView& b, const float* x, int64_t n_tokens, float* ya,
                 float* yb, std::vector<uint8_t>& scratch) {
  const MatView* w[2] = {&a, &b};
  float* y[2] = {ya, yb};
  matmul_many(pool, w, y, 2, x, n_tokens, scratch);
}

void get_row(const MatView& w, int64_t r, float* out) {
  SPOOL_CHECK(r >= 0 && r < w.n_rows);
  if (w.block_scale) {
    kernels()[w.type].scaled.dequantize(w.n_cols, static_cast<const uint8_t*>(w.data) + r * w.row_stride(),
                                        w.row_scales(r), w.block_cols, out);
    return;
  }
  dequantize_row(w.type, static_cast<const uint8_t*>(w.data) + r * w.row_stride(), out, w.n_cols);
}

}  // namespace spool
