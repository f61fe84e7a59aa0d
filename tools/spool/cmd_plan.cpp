// `spool plan MODEL | --preset kimi-k3 --device PROFILE`: what a model costs
// on a device, from its tensor table alone (plan/cost_plan.h): bytes per
// token, what stays resident, bytes read per token at an expert-cache hit
// rate, KV + state per token of context, decode tok/s and TTFT at the storage
// bound, with every assumption printed. --context-table compares K3's KV +
// state bytes with full-attention models of the same size.
#include <cstdio>
#include <memory>

#include "cli_common.h"
#include "core/byte_size.h"
#include "core/error.h"
#include "format/gguf.h"
#include "plan/cost_plan.h"

namespace spool::cli {
namespace {

struct PlanCliOptions {
  std::string model, preset, device, ram, budget, read_bw, type = "native";
  double hit_rate = NAN;
  int n_ctx = 4096, n_prompt = 512, n_chunk = 512;
  bool context_table = false;
};

DeviceProfile resolve_device(const PlanCliOptions& o) {
  DeviceProfile d;
  if (!o.device.empty()) {
    const DeviceProfile* p = find_device_profile(o.device);
    if (!p) {
      std::string list;
      for (const DeviceProfile& q : device_profiles()) list += (list.empty() ? "" : ", ") + q.name;
      throw Error("plan: unknown --device '" + o.device + "' (profiles: " + list + ", or --ram and --read-bw)");
    }
    d = *p;
  } else {
    if (o.ram.empty() || o.read_bw.empty())
      throw Error("plan: give --device PROFILE, or --ram SIZE and --read-bw RATE");
    d.name = "custom";
    d.what = "given on the command line";
  }
  if (!o.ram.empty()) {
    d.ram_bytes = (double)parse_byte_size(o.ram);
    d.budget_bytes = 0.75 * d.ram_bytes;
    d.what += "; --ram " + o.ram + " (engine budget 75% of it unless --budget)";
  }
  if (!o.budget.empty()) {
    d.budget_bytes = (double)parse_byte_size(o.budget);
    d.what += "; --budget " + o.budget;
  }
  if (!o.read_bw.empty()) {
    d.read_bw = (double)parse_byte_size(o.read_bw);
    d.what += "; --read-bw " + o.read_bw + "/s";
  }
  if (d.budget_bytes > d.ram_bytes) throw Error("plan: --budget is larger than the device's RAM");
  return d;
}

void plan(const PlanCliOptions& o) {
  if (o.model.empty() == o.preset.empty()) throw Error("plan: give a MODEL file or --preset kimi-k3 (one of them)");
  if (!o.preset.empty() && o.preset != "kimi-k3")
    throw Error("plan: the only preset is kimi-k3 (the released Kimi K3), not '" + o.preset + "'");
  if (o.model.empty() == false && o.type != "native") throw Error("plan: --type applies to --preset only");
  const CostModel m = o.model.empty() ? cost_model_kimi_k3(o.type) : cost_model_from_gguf(gguf::open(o.model), o.model);
  if (o.context_table) {
    const std::vector<int> ctx = {2048, 32768, 131072};
    std::printf("KV + recurrent state, one sequence (bytes from kv_bytes_estimate):\n%s",
                describe_context_comparison(context_comparison(m, ctx), ctx).c_str());
    if (o.device.empty() && o.ram.empty()) return;
    std::printf("\n");
  }
  PlanOptions p;
  p.device = resolve_device(o);
  p.hit_rate = o.hit_rate;
  p.n_ctx = o.n_ctx;
  p.n_prompt = o.n_prompt;
  p.n_chunk = o.n_chunk;
  std::printf("%s", describe_cost(m, p, compute_cost(m, p)).c_str());
}

}  // namespace

void add_plan_command(CLI::App& app) {
  auto o = std::make_shared<PlanCliOptions>();
  CLI::App* cmd = app.add_subcommand("plan", "What a model costs on a device: bytes per token, residency, tok/s, TTFT");
  cmd->add_option("model", o->model, "GGUF file (its metadata and tensor table are read, nothing is loaded)");
  cmd->add_option("--preset", o->preset, "kimi-k3: the released Kimi K3 (2.8T) from its public shapes, without a file");
  cmd->add_option("--type", o->type,
                  "--preset only: 'native' (MXFP4 experts, BF16 the rest, as released) or a synth --type such as "
                  "MXFP4 (llama.cpp's MXFP4_MOE mix), Q4_K, Q8_0")
      ->capture_default_str();
  cmd->add_option("--device", o->device, "Profile: phone (8 GB, 1 GB/s SSD), laptop (16 GB, 3 GB/s), workstation (64 GB, 7 GB/s)");
  cmd->add_option("--ram", o->ram, "RAM (e.g. 12G; overrides the profile's; the engine budget becomes 75%)");
  cmd->add_option("--budget", o->budget, "Memory the engine may use (e.g. 4G; default from the profile or 75% of --ram)");
  cmd->add_option("--read-bw", o->read_bw, "Storage read bandwidth per second (e.g. 1G = 1 GiB/s, as devsim reads it)");
  cmd->add_option("--hit-rate", o->hit_rate,
                  "Expert-cache hit rate 0..1, e.g. hit_rate from `spool run --stats-json` on a streamed run (default: the cached share of "
                  "the experts, i.e. uniform routing)");
  cmd->add_option("--ctx", o->n_ctx, "Context reserved for KV + state (tokens)")->capture_default_str();
  cmd->add_option("--prompt", o->n_prompt, "Prompt length for TTFT (tokens)")->capture_default_str();
  cmd->add_option("--chunk", o->n_chunk, "Prefill chunk (tokens per forward pass)")->capture_default_str();
  cmd->add_flag("--context-table", o->context_table,
                "Print KV + state bytes at 2k, 32k and 128k tokens against full-attention models of the same size");
  cmd->callback([o] { plan(*o); });
}

}  // namespace spool::cli
