// `spool plan MODEL | --preset kimi-k3|kimi-k2|deepseek-v3 [--type T]
// [--tensor-type P=T] --device PROFILE`: what a model costs
// on a device, from its tensor table alone (plan/cost_plan.h): bytes per
// token, what stays resident, bytes read per token at an expert-cache hit
// rate, KV + state per token of context, decode tok/s and TTFT at the storage
// bound, with every assumption printed. --context-table compares K3's KV +
// state bytes with full-attention models of the same size. --type (any synth
// --type: the low-bit types, llama.cpp's mixes, the dynamic UD-* mixes) prices
// the preset, or the file retyped from its shapes, in that type. --nodes N
// projects expert parallelism over N such machines (--dist ep).
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
  std::vector<std::string> tensor_types;
  double hit_rate = NAN;
  int n_ctx = 4096, n_prompt = 512, n_chunk = 512;
  bool context_table = false;
  int nodes = 1;
  double net_gbit = 1.0;
  double net_latency_ms = 0.2;
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
  if (o.model.empty() == o.preset.empty())
    throw Error("plan: give a MODEL file or --preset kimi-k3 / kimi-k2 / deepseek-v3 (one of them)");
  PlanTypes types;
  types.type = o.type;
  types.tensor_types = o.tensor_types;
  CostModel m;
  if (!o.model.empty()) m = cost_model_from_gguf(gguf::open(o.model), o.model, types);
  else if (o.preset == "kimi-k3") m = cost_model_kimi_k3(types);
  else if (o.preset == "kimi-k2" || o.preset == "deepseek-v3") m = cost_model_deepseek2(o.preset, types);
  else throw Error("plan: the presets are kimi-k3, kimi-k2 and deepseek-v3 (the released models), not '" + o.preset + "'");
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
  p.nodes = o.nodes;
  p.net_bw = o.net_gbit * 1e9 / 8;
  p.net_latency = o.net_latency_ms / 1e3;
  std::printf("%s", describe_cost(m, p, compute_cost(m, p)).c_str());
}

}  // namespace

void add_plan_command(CLI::App& app) {
  auto o = std::make_shared<PlanCliOptions>();
  CLI::App* cmd = app.add_subcommand("plan", "What a model costs on a device: bytes per token, residency, tok/s, TTFT");
  cmd->add_option("model", o->model, "GGUF file (its metadata and tensor table are read, nothing is loaded)");
  cmd->add_option("--preset", o->preset,
                  "The released model from its public shapes, without a file: kimi-k3 (2.8T), kimi-k2 (1T, "
                  "384 experts), deepseek-v3 (671B)");
  cmd->add_option("--type", o->type,
                  "'native' (a file as it is; kimi-k3: MXFP4 experts, BF16 the rest, as released) or any synth "
                  "--type: uniform (Q4_K, Q8_0, MXFP4, ...), llama.cpp's file types with its per-tensor rules "
                  "(IQ1_S, IQ1_M, IQ2_XXS, IQ2_XS, IQ2_S, IQ2_M, IQ3_XXS, IQ3_XS, IQ3_S, IQ3_M, IQ4_NL, IQ4_XS, "
                  "TQ1_0, TQ2_0, Q1_0, Q2_0, Q4_K_M), or a dynamic mix (UD-IQ1_S = the 1.8-bit Kimi file's shape, "
                  "UD-IQ1_M, UD-IQ2_XXS). With a MODEL file every tensor is retyped from its shape, as "
                  "llama-quantize would requantize it. Bytes come from the type table's bytes per block")
      ->capture_default_str();
  cmd->add_option("--tensor-type", o->tensor_types,
                  "PATTERN=TYPE on top of --type, repeatable, as synth's (e.g. ffn_down_exps=IQ2_XXS)");
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
  cmd->add_option("--nodes", o->nodes,
                  "Machines like --device under --dist ep (docs/DISTRIBUTED.md): each caches and reads its share of "
                  "the experts; the projection adds the network")
      ->check(CLI::Range(1, 4096))
      ->capture_default_str();
  cmd->add_option("--net-gbit", o->net_gbit, "With --nodes: network bandwidth, Gbit/s")->capture_default_str();
  cmd->add_option("--net-latency", o->net_latency_ms, "With --nodes: one-way network latency, ms")->capture_default_str();
  cmd->add_flag("--context-table", o->context_table,
                "Print KV + state bytes at 2k, 32k and 128k tokens against full-attention models of the same size");
  cmd->callback([o] { plan(*o); });
}

}  // namespace spool::cli
