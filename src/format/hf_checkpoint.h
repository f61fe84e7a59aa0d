// Hugging Face checkpoint directories (config.json + model.safetensors, or
// shards listed in model.safetensors.index.json) opened as a gguf::File: the
// config becomes GGUF-style "<arch>.*" metadata and the tensors a Manifest
// under GGUF names and shapes, pointing into the safetensors files (no copy).
// The tokenizer files are read one layer up (text/hf_tokenizer.h).
#pragma once

#include <string>

#include <nlohmann/json_fwd.hpp>

#include "format/gguf.h"

namespace spool::hf {

// Metadata key (bool) telling read_config that Q/K rotate in NeoX order
// (rotate_half): HF llama checkpoints are not permuted as llama.cpp's GGUFs are.
inline constexpr const char* kRopeNeoxKey = "spool.rope.neox";
// Metadata key (int array): layers of an MoE checkpoint whose feed-forward is a
// dense MLP (qwen3_moe's mlp_only_layers / decoder_sparse_step).
inline constexpr const char* kDenseFfnLayersKey = "spool.moe.dense_ffn_layers";

// True for a directory or a path to a config.json file.
bool is_checkpoint(const std::string& path);
// The checkpoint directory of such a path.
std::string checkpoint_dir(const std::string& path);

// Opens config.json and every safetensors file, validating each header, offset,
// dtype and tensor name. Throws spool::Error naming the file and the problem.
gguf::File open_checkpoint(const std::string& path);

// Reads a JSON file; throws spool::Error naming it when missing or malformed.
nlohmann::json read_json(const std::string& path);

// config.json -> "general.*" and "<arch>.*" keys of `out`; returns the GGUF
// architecture name. Computed tensors (llama3 rope factors) go into out.manifest.
std::string config_to_metadata(const nlohmann::json& config, const std::string& name, gguf::File& out);

// kimi_linear's layer kinds, KDA, MLA and MoE keys under llama.cpp's
// kimi-linear names (hf_config_kimi.cpp); `a` is "kimi-linear.".
void kimi_linear_to_metadata(const nlohmann::json& config, const std::string& a, gguf::File& out);

}  // namespace spool::hf
