// Hugging Face model folders of the Llama family (LlamaForCausalLM): its tensor table (the
// fused q/k/v and gate/up matrices as HF's projections stacked by rows), its config.json
// written and checked, its checkpoints written and read back.
#include <gtest/gtest.h>

#include <map>

#include "aiscale/core/fs.h"
#include "aiscale/nn/models/gpt_layout.h"
#include "aiscale/train/checkpoint.h"
#include "aiscale/train/hf_checkpoint.h"
#include "aiscale/train/hf_config.h"
#include "aiscale/train/hf_mapping.h"
#include "aiscale/train/hf_weights.h"
#include "aiscale/train/safetensors.h"
#include "../support/error_of.h"
#include "../support/hf_folders.h"
#include "../support/run_support.h"

using namespace aiscale;
using namespace aiscale::train;
using namespace aiscale::testsupport;

namespace {
// The Llama family: its table, its config.json, its checkpoints.

nn::GptConfig llama_tiny() { return nn::gpt_preset("llama-tiny"); }  // untied, 2 of 4 KV heads

std::vector<float> iota_params(int64_t n) {
  std::vector<float> p(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) p[i] = static_cast<float>(i % 9973) * 1e-3f - 4.0f;
  return p;
}

TEST(HfLlama, FusedMatricesAreTheHfProjectionsStackedByRows) {
  const nn::GptConfig c = llama_tiny();
  const int64_t C = c.n_embd, kv = c.kv_rows(), F = c.ffn();
  ASSERT_EQ(kv, 32);  // 2 KV heads of 16
  const std::vector<float> params = iota_params(c.num_params());
  const std::vector<SafeTensor> ts = hf_export(hf_model_map(c), params.data());
  std::map<std::string, const SafeTensor*> by_name;
  for (const auto& t : ts) by_name[t.name] = &t;
  // LlamaForCausalLM's names, every tensor once; lm_head of its own (untied).
  EXPECT_EQ(ts.size(), 2u + 9u * c.n_layer + 1u);
  for (const char* n : {"model.embed_tokens.weight", "model.norm.weight", "lm_head.weight",
                        "model.layers.1.input_layernorm.weight", "model.layers.1.post_attention_layernorm.weight",
                        "model.layers.1.self_attn.o_proj.weight", "model.layers.1.mlp.down_proj.weight"})
    EXPECT_TRUE(by_name.count(n)) << n;
  const nn::GptLayout layout(c);
  const float* qkv = params.data() + layout.at(1, nn::GptBlockParam::qkv_w);
  const SafeTensor& q = *by_name.at("model.layers.1.self_attn.q_proj.weight");
  const SafeTensor& k = *by_name.at("model.layers.1.self_attn.k_proj.weight");
  const SafeTensor& v = *by_name.at("model.layers.1.self_attn.v_proj.weight");
  EXPECT_EQ(q.shape, (std::vector<int64_t>{C, C}));
  EXPECT_EQ(k.shape, (std::vector<int64_t>{kv, C}));
  EXPECT_EQ(v.shape, (std::vector<int64_t>{kv, C}));
  EXPECT_EQ(q.data, std::vector<float>(qkv, qkv + C * C));
  EXPECT_EQ(k.data, std::vector<float>(qkv + C * C, qkv + (C + kv) * C));
  EXPECT_EQ(v.data, std::vector<float>(qkv + (C + kv) * C, qkv + (C + 2 * kv) * C));
  const float* gate_up = params.data() + layout.at(1, nn::GptBlockParam::fc_w);
  const SafeTensor& gate = *by_name.at("model.layers.1.mlp.gate_proj.weight");
  const SafeTensor& up = *by_name.at("model.layers.1.mlp.up_proj.weight");
  EXPECT_EQ(gate.shape, (std::vector<int64_t>{F, C}));
  EXPECT_EQ(gate.data, std::vector<float>(gate_up, gate_up + F * C));
  EXPECT_EQ(up.data, std::vector<float>(gate_up + F * C, gate_up + 2 * F * C));
  // And back, from a folder with its config.json, bit for bit, also in shards.
  for (const uint64_t shard : {kHfDefaultShardBytes, uint64_t{30'000}}) {
    const fs::path d = write_model(temp_dir("hf-llama-" + std::to_string(shard)), c, params, shard);
    EXPECT_EQ(read_hf_model(d.string(), c, "train.init_from"), params);
  }
}

TEST(HfLlama, TiedHeadMayBePresentOrAbsent) {
  nn::GptConfig c = llama_tiny();
  c.tie_embeddings = true;
  const std::vector<float> params = iota_params(c.num_params());
  std::vector<SafeTensor> ts = hf_export(hf_model_map(c), params.data());
  for (const auto& t : ts) EXPECT_NE(t.name, "lm_head.weight");
  const fs::path d = temp_dir("hf-llama-tied");
  ts.push_back({"lm_head.weight", ts[0].shape, ts[0].data, "BF16"});
  ts.push_back({"model.layers.0.self_attn.rotary_emb.inv_freq", {8}, std::vector<float>(8), "F32"});
  write_files(d, {{"model.safetensors", safetensors_serialize(ts)}, {"config.json", hf_config_json(c)}});
  EXPECT_EQ(read_hf_model(d.string(), c, "train.init_from"), params);
  // An untied model needs its head: missing, it is named.
  const nn::GptConfig untied = llama_tiny();
  ts.pop_back();
  ts.pop_back();
  write_files(d, {{"model.safetensors", safetensors_serialize(ts)}, {"config.json", hf_config_json(untied)}});
  EXPECT_NE(import_error(d, untied).find("1 missing tensor: lm_head.weight"), std::string::npos)
      << import_error(d, untied);
}

TEST(HfLlama, ConfigJsonAsTransformersWritesItIsChecked) {
  const nn::GptConfig c = llama_tiny();
  // LlamaConfig's own spelling: no head_dim, rope_scaling null, defaults left out.
  nlohmann::json j = {{"architectures", {"LlamaForCausalLM"}}, {"model_type", "llama"},
                      {"hidden_size", 64}, {"intermediate_size", 176}, {"num_hidden_layers", 2},
                      {"num_attention_heads", 4}, {"num_key_value_heads", 2}, {"vocab_size", 256},
                      {"max_position_embeddings", 2048}, {"rms_norm_eps", 1e-5},
                      {"rope_theta", 10000.0}, {"rope_scaling", nullptr}, {"hidden_act", "silu"}};
  EXPECT_NO_THROW(check_hf_config(j, c, "config.json"));
  EXPECT_NO_THROW(check_hf_config(nlohmann::json::parse(hf_config_json(c)), c, "config.json"));
  j["num_key_value_heads"] = 4;
  j["rms_norm_eps"] = 1e-6;
  j["tie_word_embeddings"] = true;
  j["rope_scaling"] = {{"rope_type", "llama3"}, {"factor", 8.0}, {"low_freq_factor", 1.0},
                       {"high_freq_factor", 4.0}, {"original_max_position_embeddings", 8192}};
  std::string e = testsupport::error_of([&] { check_hf_config(j, c, "d/config.json"); });
  EXPECT_NE(e.find("num_key_value_heads = 4, the model's model.n_kv_head = 2"), std::string::npos) << e;
  EXPECT_NE(e.find("tie_word_embeddings = true, the model's model.tie_embeddings = false"), std::string::npos) << e;
  EXPECT_NE(e.find("rms_norm_eps = 1e-06, the model's model.norm_eps = 1e-05"), std::string::npos) << e;
  EXPECT_NE(e.find("rope_scaling.factor = 8, the model's model.rope_scaling_factor = 0"), std::string::npos) << e;
  EXPECT_NE(e.find("--set model.n_kv_head=4 model.tie_embeddings=true model.norm_eps=1e-06 "
                   "model.rope_scaling_factor=8"), std::string::npos) << e;
  // Llama 3.2 1B's config.json names its preset.
  const nlohmann::json one_b = {{"model_type", "llama"}, {"hidden_size", 2048}, {"intermediate_size", 8192},
                                {"num_hidden_layers", 16}, {"num_attention_heads", 32},
                                {"num_key_value_heads", 8}, {"vocab_size", 128256},
                                {"max_position_embeddings", 131072}, {"rms_norm_eps", 1e-5},
                                {"rope_theta", 500000.0}, {"tie_word_embeddings", true},
                                {"rope_scaling", {{"rope_type", "llama3"}, {"factor", 32.0}, {"low_freq_factor", 1.0},
                                                  {"high_freq_factor", 4.0}, {"original_max_position_embeddings", 8192}}}};
  EXPECT_NO_THROW(check_hf_config(one_b, nn::gpt_preset("llama3-1b-shape"), "config.json"));
  e = testsupport::error_of([&] { check_hf_config(one_b, c, "config.json"); });
  EXPECT_NE(e.find("(or model.preset = \"llama3-1b-shape\", which is that shape)"), std::string::npos) << e;
  // Variants and the other family.
  j = nlohmann::json::parse(hf_config_json(c));
  j["hidden_act"] = "gelu";
  j["attention_bias"] = true;
  e = testsupport::error_of([&] { check_hf_config(j, c, "config.json"); });
  EXPECT_NE(e.find("hidden_act = \"gelu\""), std::string::npos) << e;
  EXPECT_NE(e.find("attention_bias = true"), std::string::npos) << e;
  e = testsupport::error_of([&] { check_hf_config(nlohmann::json::parse(hf_config_json(tiny())), c, "config.json"); });
  EXPECT_NE(e.find("describes a gpt2 model (model_type \"gpt2\"); this run trains the llama family: set "
                   "model.family = \"gpt2\""), std::string::npos) << e;
}

TEST(HfLlama, CheckpointWritesAndReadsTheLlamaFolder) {
  const nn::GptConfig c = llama_tiny();
  train::CheckpointState s;
  s.model = c;
  s.step = 3;
  s.params = iota_params(c.num_params());
  s.m.assign(s.params.size(), 0.5f);
  s.v.assign(s.params.size(), 0.25f);
  s.batch_size = 4;
  s.seq_len = 16;
  s.config_toml = "[model]\npreset = \"llama-tiny\"\n";
  s.max_shard_bytes = 50'000;
  const fs::path d = temp_dir("hf-llama-ckpt");
  train::write_checkpoint(d.string(), s, 2);
  const fs::path step = d / train::checkpoint_name(3);
  EXPECT_TRUE(fs::exists(step / kHfWeightsIndex));
  EXPECT_EQ(nlohmann::json::parse(read_file((step / "config.json").string()))["model_type"], "llama");
  const train::CheckpointState back = train::read_checkpoint(step.string(), true, &c);
  EXPECT_EQ(back.params, s.params);
  EXPECT_EQ(back.m, s.m);
  EXPECT_TRUE(back.model.llama());
  EXPECT_EQ(back.model.kv_heads(), 2);
  EXPECT_EQ(back.model.ffn(), 176);
  EXPECT_FALSE(back.model.tied());
  // Another KV head count is another model.
  nn::GptConfig other = c;
  other.n_kv_head = 4;
  const std::string e = testsupport::error_of([&] { train::read_checkpoint(step.string(), true, &other); });
  EXPECT_NE(e.find("n_kv_head=2"), std::string::npos) << e;
}

}  // namespace
