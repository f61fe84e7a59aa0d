// `spool plan --preset kimi-k2 | deepseek-v3`: the released deepseek2-family
// models (real layer, expert and vocabulary counts, from synth_deepseek2.h's
// presets) as a CostModel in any synth --type or mix, so a user sees what a
// 1.8-bit Kimi K2 costs on a device without making the file.
#include <cstdio>
#include <map>

#include "core/error.h"
#include "plan/cost_plan.h"
#include "synth/synth_deepseek2.h"

namespace spool {

CostModel cost_model_deepseek2(const std::string& preset, const PlanTypes& types) {
  const Deepseek2Preset* p = find_deepseek2_preset(preset);
  if (!p) throw Error("plan: '" + preset + "' is not a deepseek2 preset");
  if (types.native())
    throw Error("plan: --preset " + preset + " ships in FP8; give a --type (e.g. UD-IQ1_S, IQ2_XXS, Q4_K, Q8_0)");
  SynthOptions o;
  o.arch = "deepseek2";
  o.preset = preset;
  o.type = types.type;
  o.tensor_types = types.tensor_types;
  o.dry_run = true;
  const Deepseek2Plan plan = plan_deepseek2(o, p->real_vocab);
  const Deepseek2Preset& s = plan.shape;
  CostModel m;
  m.source = "preset " + preset + " (the released model's shapes, no file) as --type " + types.type;
  for (const std::string& t : types.tensor_types) m.source += " --tensor-type " + t;
  m.arch = "deepseek2";
  m.n_layer = s.n_layer;
  m.n_expert = s.n_expert;
  m.n_expert_used = s.n_expert_used;
  m.n_vocab = plan.n_vocab;
  m.expert_row = s.n_embd;
  std::map<std::string, uint64_t> by_type;
  for (const SynthTensor& t : plan.tensors) {
    m.tensors.push_back({t.name, t.bytes, t.layer, t.routed_expert});
    by_type[dtype_name(t.type)] += t.bytes;
  }
  for (const auto& [type, bytes] : by_type) {
    char gb[32];
    std::snprintf(gb, sizeof gb, " %.3f GB", bytes / 1e9);
    m.types += (m.types.empty() ? "" : ", ") + type + gb;
  }
  // MLA: one latent row (kv_lora_rank) plus the rope key per token and layer.
  m.kv.arch = "deepseek2";
  m.kv.n_layer = s.n_layer;
  m.kv.n_head = s.n_head;
  m.kv.mla.kv_lora_rank = s.kv_lora_rank;
  m.kv.rope.n_dims = s.qk_rope;
  return m;
}

}  // namespace spool
