// The mixture-of-experts feed-forward block (Mixtral, Qwen3-MoE, DeepSeek-V3):
// a router picks the top-k experts of each token (softmax or sigmoid scores,
// DeepSeek's selection bias and expert groups, optional renormalization and
// scaling), then each routed expert runs its SwiGLU once over all of the
// batch's tokens routed to it, and the outputs are summed with the router
// weights. Experts are acquired one at a time from the weight store, so only
// the experts a batch routes to are ever touched, each once per forward pass.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model/config.h"
#include "model/expert_parallel.h"
#include "weights/weight_store.h"

namespace spool {

class ThreadPool;

// One expert's SwiGLU matrices: its slices of the stacked expert tensors.
struct ExpertWeights {
  const TensorEntry* gate = nullptr;  // [n_embd, n_ff_exp]
  const TensorEntry* up = nullptr;    // [n_embd, n_ff_exp]
  const TensorEntry* down = nullptr;  // [n_ff_exp, n_embd]
};

struct MoeLayerWeights {
  int layer = -1;                           // N of "blk.N."
  const TensorEntry* router = nullptr;      // ffn_gate_inp [n_embd, n_expert]
  const TensorEntry* choice_bias = nullptr; // optional exp_probs_b [n_expert]: added to scores to choose only
  std::vector<ExpertWeights> experts;       // [n_expert]
  ExpertWeights shared;                     // optional shared experts, [n_embd, n_expert_shared * n_ff_exp]
  // Latent MoE (Kimi K3, cfg.n_embd_exp > 0): routed experts read and write
  // n_embd_exp-wide rows; their weighted sum is normed and projected back.
  const TensorEntry* latent_down = nullptr;  // ffn_routed_down [n_embd, n_embd_exp]
  const TensorEntry* latent_up = nullptr;    // ffn_routed_up   [n_embd_exp, n_embd]
  const TensorEntry* latent_norm = nullptr;  // ffn_routed_norm [n_embd_exp]
  bool has_shared() const { return shared.gate != nullptr; }
};

// g[i] = act(g[i], u[i]): SwiGLU, or K3's situ when cfg.situ_beta > 0.
void ffn_activation(const ModelConfig& cfg, float* g, const float* u, int64_t n);

// Finds and shape-checks layer `prefix` ("blk.N.")'s router and expert slices.
MoeLayerWeights load_moe_weights(const Manifest& m, const std::string& prefix, const ModelConfig& cfg);

// Every matrix of the layer, for WeightStore::prepare_matmul_weights.
std::vector<const TensorEntry*> moe_matmul_weights(const MoeLayerWeights& w);

// Router: for each token, the top-k experts by softmax score (ties to the lower
// index), in descending score order, and their weights (softmax scores,
// renormalized to sum to 1 when `renormalize`).
// logits: [n_tokens, n_expert]; ids, weights: [n_tokens, k].
void route_softmax_topk(const float* logits, int n_tokens, int n_expert, int k, bool renormalize, int32_t* ids,
                        float* weights);

// The general router. Scores are softmax(logits) or sigmoid(logits); experts
// are chosen by score + choice_bias (may be null), only from the best
// n_expert_group_used groups (a group's rank: the sum of its two best biased
// scores) when cfg.n_expert_group > 1; the weights are the unbiased scores,
// renormalized if cfg.expert_weights_norm, times cfg.expert_weights_scale.
// ids are in descending order of biased score (ties to the lower index).
void route_experts(const ModelConfig& cfg, const float* logits, const float* choice_bias, int n_tokens, int32_t* ids,
                   float* weights);

// Activation buffers, grown as needed.
struct MoeScratch {
  std::vector<float> logits;             // [n_tokens, n_expert]
  std::vector<int32_t> ids;              // [n_tokens, n_expert_used]
  std::vector<float> weights;            // [n_tokens, n_expert_used]
  std::vector<int32_t> group_start;      // [n_expert + 1] offsets into group_row
  std::vector<int32_t> group_row;        // [n_tokens * n_expert_used] routed (token, slot) rows by expert
  std::vector<float> xe, gate, up, ye;   // [m, n_embd], [m, n_ff_exp] x2, [m, n_embd] for one expert's m tokens
  std::vector<float> xl, yl;             // latent MoE: [n_tokens, n_embd_exp] expert inputs and summed outputs
  std::vector<uint8_t> mm;               // matmul activation conversion
  // Expert parallelism: rows of the remote experts, in and out; the local
  // experts' outputs, kept until every output is summed in expert order.
  std::vector<float> remote_in, remote_out, local_out;
  std::vector<int32_t> out_at;           // [n_expert] offset of an expert's rows in local_out or remote_out
  std::vector<ExpertJob> jobs;           // the selected experts and their rows, in expert-id order
  std::vector<uint8_t> job_here;         // [jobs] 1: computed in this process (ExpertParallel::place)
  std::vector<uint8_t> here;             // [n_expert] the same by expert id
};

// out = sum over each token's routed experts e of weight_e * down_e(silu(gate_e x) * up_e x),
// plus the shared experts' SwiGLU when the layer has them.
// xn, out: [n_tokens, n_embd]. With `ep`, the routed experts it does not
// call local run in other processes (model/expert_parallel.h); the sum is the
// same, bit for bit.
void moe_forward(WeightStore& store, ThreadPool& pool, const ModelConfig& cfg, const MoeLayerWeights& w,
                 const float* xn, float* out, int n_tokens, MoeScratch& s, ExpertParallel* ep = nullptr);

// The routed experts' side of expert parallelism: for each job in order, its
// rows of `input` ([rows, width] one job after another) through the expert's
// SwiGLU, into `output` (same layout, before router weights).
void run_routed_experts(WeightStore& store, ThreadPool& pool, const ModelConfig& cfg, const MoeLayerWeights& w,
                        const std::vector<ExpertJob>& jobs, const float* input, int width, float* output,
                        MoeScratch& s);

// Speculative expert prefetch (streaming stores only: nothing happens unless
// store.wants_expert_guess()): applies layer `next`'s router to xn, this
// layer's MoE input, and tells the store which experts it expects there.
// Skipped for batches that route to more than half the experts (prompt chunks).
// Uses s's router buffers (moe_forward recomputes them).
void guess_next_experts(WeightStore& store, ThreadPool& pool, const ModelConfig& cfg, const MoeLayerWeights& next,
                        const float* xn, int n_tokens, MoeScratch& s);

}  // namespace spool
