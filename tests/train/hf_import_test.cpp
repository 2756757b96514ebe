// Hugging Face model folders: the safetensors reader (one file, shards with an index,
// dtypes, damaged files), GPT-2's tensor table and rows stacked from several HF tensors
// (as a fused QKV matrix is), GPT-2's config.json check and the round trip export ->
// import. The Llama family's are in hf_llama_test.cpp.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>

#include <fmt/format.h>

#include "aiscale/core/dtype.h"
#include "aiscale/core/error.h"
#include "aiscale/core/fs.h"
#include "aiscale/nn/models/gpt.h"
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

TEST(SafeTensorsReader, ReadsF32Bf16AndF16ConvertedToF32) {
  const fs::path d = temp_dir("st-dtypes");
  const std::vector<float> v = {1.0f, -2.5f, 3.14159f, 1e-3f, 65504.0f, -0.0f};
  std::vector<SafeTensor> ts;
  for (const char* dtype : {"F32", "BF16", "F16"}) ts.push_back({std::string("t_") + dtype, {2, 3}, v, dtype});
  atomic_write_file((d / "a.safetensors").string(), safetensors_serialize(ts));
  SafeTensorsFile f((d / "a.safetensors").string());
  ASSERT_EQ(f.tensors().size(), 3u);
  for (const char* dtype : {"F32", "BF16", "F16"}) {
    const SafeTensorInfo& info = f.tensors().at(std::string("t_") + dtype);
    EXPECT_EQ(info.dtype, dtype);
    EXPECT_EQ(info.shape, (std::vector<int64_t>{2, 3}));
    std::vector<float> out(6);
    f.read(info, out.data());
    for (size_t i = 0; i < v.size(); ++i) {
      const float want = std::string(dtype) == "F32"    ? v[i]
                         : std::string(dtype) == "BF16" ? bf16_to_f32(f32_to_bf16(v[i]))
                                                        : f16_to_f32(f32_to_f16(v[i]));
      EXPECT_EQ(f32_bits(out[i]), f32_bits(want)) << dtype << " " << i;
    }
  }
}

// A file whose header names a dtype aiscale does not read: written by hand.
std::string file_with_dtype(const std::string& dtype, size_t bytes) {
  std::string h = R"({"x":{"dtype":")" + dtype + R"(","shape":[2],"data_offsets":[0,)" +
                  std::to_string(bytes) + "]}}";
  std::string out;
  uint64_t n = h.size();
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((n >> (8 * i)) & 0xff));
  return out + h + std::string(bytes, '\0');
}

TEST(SafeTensorsReader, OtherDtypesAreRefusedByName) {
  const fs::path d = temp_dir("st-i64");
  atomic_write_file((d / "i.safetensors").string(), file_with_dtype("I64", 16));
  SafeTensorsFile f((d / "i.safetensors").string());  // the header is valid
  std::vector<float> out(2);
  const std::string e = testsupport::error_of([&] { f.read(f.tensors().at("x"), out.data()); });
  EXPECT_NE(e.find("i.safetensors"), std::string::npos) << e;
  EXPECT_NE(e.find("'x' has dtype I64"), std::string::npos) << e;
  EXPECT_NE(e.find("F32, BF16 and F16"), std::string::npos) << e;
  // A byte count that does not fit the dtype is corrupt.
  atomic_write_file((d / "bad.safetensors").string(), file_with_dtype("I64", 12));
  EXPECT_NE(testsupport::error_of([&] { SafeTensorsFile((d / "bad.safetensors").string()); })
                .find("'x' of shape [2] and dtype I64 does not fill its 12 bytes"),
            std::string::npos);
}

TEST(SafeTensorsReader, TruncatedFileNamesTheFileAndTensor) {
  const fs::path d = temp_dir("st-cut");
  std::vector<SafeTensor> ts = {{"first", {4}, {1, 2, 3, 4}, "F32"}, {"second", {4}, {5, 6, 7, 8}, "F32"}};
  const std::string path = (d / "m.safetensors").string();
  atomic_write_file(path, safetensors_serialize(ts));
  // Cut before opening: the header's offsets are checked against the file's size.
  fs::resize_file(path, fs::file_size(path) - 4);
  std::string e = testsupport::error_of([&] { SafeTensorsFile f(path); });
  EXPECT_NE(e.find(path), std::string::npos) << e;
  EXPECT_NE(e.find("'second' lies outside the file"), std::string::npos) << e;
  // Cut after opening: the read names the tensor.
  atomic_write_file(path, safetensors_serialize(ts));
  SafeTensorsFile f(path);
  fs::resize_file(path, fs::file_size(path) - 4);
  std::vector<float> out(4);
  f.read(f.tensors().at("first"), out.data());
  EXPECT_EQ(out, (std::vector<float>{1, 2, 3, 4}));
  e = testsupport::error_of([&] { f.read(f.tensors().at("second"), out.data()); });
  EXPECT_NE(e.find("truncated: tensor 'second'"), std::string::npos) << e;
  // A header length beyond the file.
  atomic_write_file(path, std::string("\xff\xff\x00\x00\x00\x00\x00\x00{}", 10));
  e = testsupport::error_of([&] { SafeTensorsFile f2(path); });
  EXPECT_NE(e.find("header of 65535 bytes does not fit"), std::string::npos) << e;
}

TEST(HfWeightsFolder, ShardsWithIndexReadLikeOneFile) {
  const nn::GptConfig c = tiny();
  const std::vector<float> params = nn::gpt_init_params(c, 11);
  // 40 KB shards: wte alone is 32 KB, so the model takes several files.
  const auto files = hf_model_files(c, params, 40'000);
  ASSERT_GT(files.size(), 3u);
  EXPECT_EQ(files[0].first, fmt::format("model-00001-of-{:05d}.safetensors", files.size() - 2));
  const fs::path d = temp_dir("hf-sharded");
  write_files(d, files);
  EXPECT_FALSE(fs::exists(d / "model.safetensors"));
  const auto index = nlohmann::json::parse(read_file((d / kHfWeightsIndex).string()));
  EXPECT_EQ(index["weight_map"]["wte.weight"], files[0].first);
  EXPECT_EQ(index["weight_map"].size(), gpt2_hf_map(c).tensors.size());
  for (const auto& [name, bytes] : files) {  // no shard beyond the limit but a lone tensor
    if (name.ends_with(".safetensors") && bytes.size() > 40'000 + 1000) {
      EXPECT_EQ(safetensors_parse(bytes, name).size(), 1u) << name;
    }
  }
  const std::vector<float> back = read_hf_model(d.string(), c, "train.init_from");
  ASSERT_EQ(back.size(), params.size());
  EXPECT_EQ(std::memcmp(back.data(), params.data(), params.size() * 4), 0);
  // Under the limit: one model.safetensors, no index.
  const auto one = hf_model_files(c, params);
  ASSERT_EQ(one.size(), 2u);
  EXPECT_EQ(one[0].first, "model.safetensors");
}

TEST(HfWeightsFolder, DamagedIndexIsNamed) {
  const nn::GptConfig c = tiny();
  const fs::path d = temp_dir("hf-index");
  write_model(d, c, nn::gpt_init_params(c, 1), 40'000);
  const std::string index_path = (d / kHfWeightsIndex).string();
  auto index = nlohmann::json::parse(read_file(index_path));
  const std::string shard = index["weight_map"]["wpe.weight"];
  // A tensor mapped to a file that does not hold it.
  index["weight_map"]["ln_f.bias"] = shard;
  atomic_write_file(index_path, index.dump());
  std::string e = import_error(d, c);
  EXPECT_NE(e.find("maps tensor 'ln_f.bias' to"), std::string::npos) << e;
  // A missing shard.
  index["weight_map"]["ln_f.bias"] = "model-00009-of-00009.safetensors";
  atomic_write_file(index_path, index.dump());
  e = import_error(d, c);
  EXPECT_NE(e.find("names the shard 'model-00009-of-00009.safetensors'"), std::string::npos) << e;
  // A file outside the folder.
  index["weight_map"]["ln_f.bias"] = "../elsewhere.safetensors";
  atomic_write_file(index_path, index.dump());
  e = import_error(d, c);
  EXPECT_NE(e.find("shards must be files of the index's own folder"), std::string::npos) << e;
}

TEST(HfImport, ExportThenImportIsBitIdentical) {
  const nn::GptConfig c = tiny();
  const std::vector<float> params = nn::gpt_init_params(c, 3);
  const fs::path d = write_model(temp_dir("hf-roundtrip"), c, params);
  const std::vector<float> back = read_hf_model(d.string(), c, "train.init_from");
  ASSERT_EQ(back.size(), params.size());
  EXPECT_EQ(std::memcmp(back.data(), params.data(), params.size() * 4), 0);
  // The Conv1D weights are stored transposed: (in, out) = (C, 3C) for c_attn.
  const auto tensors = safetensors_parse(read_file((d / "model.safetensors").string()), "m");
  EXPECT_EQ(tensors.at("h.0.attn.c_attn.weight").shape, (std::vector<int64_t>{64, 192}));
  EXPECT_EQ(tensors.at("h.1.mlp.c_proj.weight").shape, (std::vector<int64_t>{256, 64}));
  EXPECT_FALSE(tensors.count("lm_head.weight"));  // tied to wte
}

TEST(HfImport, TransformersSpellingsLoad) {
  // GPT2LMHeadModel.save_pretrained: "transformer." before every name, perhaps the tied
  // lm_head.weight, and (older versions) the attention mask buffers.
  const nn::GptConfig c = tiny();
  const std::vector<float> params = nn::gpt_init_params(c, 5);
  std::vector<SafeTensor> ts = gpt2_tensors(c, params);
  for (auto& t : ts) t.name = "transformer." + t.name;
  ts.push_back({"lm_head.weight", {c.vocab_size, c.n_embd}, ts[0].data, "F32"});
  ts.push_back({"transformer.h.0.attn.bias", {1, 1, 32, 32}, std::vector<float>(1024, 1.0f), "F32"});
  ts.push_back({"h.1.attn.masked_bias", {}, {-1e4f}, "F32"});
  const fs::path d = temp_dir("hf-prefixed");
  write_tensors(d, c, ts);
  EXPECT_EQ(read_hf_model(d.string(), c, "train.init_from"), params);
}

TEST(HfImport, Bf16CheckpointLoads) {
  const nn::GptConfig c = tiny();
  const std::vector<float> params = nn::gpt_init_params(c, 9);
  std::vector<SafeTensor> ts = gpt2_tensors(c, params);
  for (auto& t : ts) t.dtype = "BF16";
  const fs::path d = temp_dir("hf-bf16");
  write_tensors(d, c, ts);
  const std::vector<float> back = read_hf_model(d.string(), c, "train.init_from");
  ASSERT_EQ(back.size(), params.size());
  size_t changed = 0;
  for (size_t i = 0; i < params.size(); ++i) {
    ASSERT_EQ(f32_bits(back[i]), f32_bits(bf16_to_f32(f32_to_bf16(params[i])))) << i;
    changed += back[i] != params[i];
  }
  EXPECT_GT(changed, params.size() / 2);  // really rounded, not read as fp32
}

TEST(HfImport, EveryMismatchIsNamedInOneMessage) {
  const nn::GptConfig c = tiny();
  std::vector<SafeTensor> ts = gpt2_tensors(c, nn::gpt_init_params(c, 2));
  std::vector<SafeTensor> kept;
  for (auto& t : ts) {
    if (t.name == "h.1.ln_2.bias" || t.name == "wpe.weight") continue;  // missing
    if (t.name == "h.0.mlp.c_fc.bias") {                                 // wrong shape
      t.shape = {255};
      t.data.resize(255);
    }
    kept.push_back(t);
  }
  kept.push_back({"h.2.ln_1.weight", {64}, std::vector<float>(64), "F32"});  // unexpected
  kept.push_back({"lm_head.weight", {10, 64}, std::vector<float>(640), "F32"});  // tied, wrong shape
  const fs::path d = temp_dir("hf-mismatch");
  write_tensors(d, c, kept);
  const std::string e = import_error(d, c);
  EXPECT_NE(e.find("model.safetensors' does not fit the model (GPT2LMHeadModel, 28 tensors)"),
            std::string::npos) << e;
  EXPECT_NE(e.find("2 missing tensors: wpe.weight; h.1.ln_2.bias"), std::string::npos) << e;
  EXPECT_NE(e.find("1 unexpected tensor: h.2.ln_1.weight"), std::string::npos) << e;
  EXPECT_NE(e.find("h.0.mlp.c_fc.bias is [255] in the checkpoint, the model's is [256]"),
            std::string::npos) << e;
  EXPECT_NE(e.find("lm_head.weight is [10, 64] in the checkpoint, the model's is [256, 64]"),
            std::string::npos) << e;
  EXPECT_NE(e.find("2 shapes differ"), std::string::npos) << e;
}

TEST(HfImport, UnreadableDtypeIsNamedBeforeAnyRead) {
  const nn::GptConfig c = tiny();
  std::vector<SafeTensor> ts = gpt2_tensors(c, nn::gpt_init_params(c, 2));
  const fs::path d = temp_dir("hf-dtype");
  write_tensors(d, c, ts);
  // Rewrite ln_f.bias's dtype in the header to a 4-byte integer type of the same size.
  std::string bytes = read_file((d / "model.safetensors").string());
  const size_t at = bytes.find(R"("ln_f.bias":{"dtype":"F32")");
  ASSERT_NE(at, std::string::npos);
  bytes.replace(bytes.find("F32", at), 3, "I32");
  atomic_write_file((d / "model.safetensors").string(), bytes);
  const std::string e = import_error(d, c);
  EXPECT_NE(e.find("dtype aiscale does not read (F32, BF16, F16 only): ln_f.bias is I32"),
            std::string::npos) << e;
}

TEST(HfImport, RowsStackedFromSeveralTensors) {
  // A fused matrix of 2 + 1 + 1 rows of 3 columns made of three HF tensors (as a fused
  // q/k/v is of q_proj, k_proj, v_proj), a 1D tensor, and one stored transposed.
  HfModelMap m;
  m.architecture = "Test";
  m.tensors.push_back({"qkv", 0, {4, 3}, false, {{"q.weight", 2}, {"k.weight", 1}, {"v.weight", 1}}});
  m.tensors.push_back({"norm", 12, {3}, false, {{"norm.weight", 3}}});
  m.tensors.push_back({"gate_up", 15, {4, 2}, true, {{"gate.weight", 2}, {"up.weight", 2}}});
  m.size = 23;
  std::vector<float> flat(23);
  for (int i = 0; i < 23; ++i) flat[i] = float(i);
  const std::vector<SafeTensor> ts = hf_export(m, flat.data());
  ASSERT_EQ(ts.size(), 6u);
  EXPECT_EQ(ts[0].name, "q.weight");
  EXPECT_EQ(ts[0].shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(ts[0].data, (std::vector<float>{0, 1, 2, 3, 4, 5}));
  EXPECT_EQ(ts[1].data, (std::vector<float>{6, 7, 8}));
  EXPECT_EQ(ts[2].data, (std::vector<float>{9, 10, 11}));
  EXPECT_EQ(ts[3].data, (std::vector<float>{12, 13, 14}));
  // gate: our rows 0-1 of (4, 2) = [[15, 16], [17, 18]], stored (2 cols, 2 rows) transposed.
  EXPECT_EQ(ts[4].shape, (std::vector<int64_t>{2, 2}));
  EXPECT_EQ(ts[4].data, (std::vector<float>{15, 17, 16, 18}));
  EXPECT_EQ(ts[5].data, (std::vector<float>{19, 21, 20, 22}));
  const fs::path d = temp_dir("hf-stacked");
  atomic_write_file((d / "model.safetensors").string(), safetensors_serialize(ts));
  EXPECT_EQ(hf_import(m, HfWeights(d.string()), ""), flat);
  // Pieces in another order are still placed by name.
  std::vector<SafeTensor> shuffled = {ts[5], ts[2], ts[0], ts[3], ts[4], ts[1]};
  atomic_write_file((d / "model.safetensors").string(), safetensors_serialize(shuffled));
  EXPECT_EQ(hf_import(m, HfWeights(d.string()), ""), flat);
  // One piece of the wrong size is named by its own name.
  shuffled[1].shape = {2, 3};
  shuffled[1].data.resize(6);
  atomic_write_file((d / "model.safetensors").string(), safetensors_serialize(shuffled));
  const std::string e = testsupport::error_of([&] { hf_import(m, HfWeights(d.string()), "FIX"); });
  EXPECT_NE(e.find("v.weight is [2, 3] in the checkpoint, the model's is [1, 3]"), std::string::npos) << e;
  EXPECT_TRUE(e.ends_with("FIX")) << e;
}

TEST(HfConfig, EachDifferingFieldIsNamedWithTheFix) {
  const nn::GptConfig c = tiny();
  auto j = nlohmann::json::parse(hf_config_json(c));
  EXPECT_NO_THROW(check_hf_config(j, c, "config.json"));
  j["n_layer"] = 12;
  j["n_head"] = 12;
  j["n_embd"] = 768;
  j["n_positions"] = 1024;
  j["vocab_size"] = 50257;
  const std::string e = testsupport::error_of([&] { check_hf_config(j, c, "d/config.json"); });
  EXPECT_NE(e.find("'d/config.json' does not describe the model being trained"), std::string::npos) << e;
  EXPECT_NE(e.find("n_layer = 12, the model's model.n_layer = 2"), std::string::npos) << e;
  EXPECT_NE(e.find("n_positions = 1024, the model's model.block_size = 32"), std::string::npos) << e;
  EXPECT_NE(e.find("vocab_size = 50257, the model's model.vocab_size = 256"), std::string::npos) << e;
  EXPECT_NE(e.find("--set model.n_layer=12 model.n_head=12 model.n_embd=768 model.block_size=1024 "
                   "model.vocab_size=50257 (or model.preset = \"gpt2-124m\""),
            std::string::npos) << e;
}

TEST(HfConfig, OtherModelsAndVariantsAreRefused) {
  const nn::GptConfig c = tiny();
  auto j = nlohmann::json::parse(hf_config_json(c));
  j["model_type"] = "llama";
  EXPECT_NE(testsupport::error_of([&] { check_hf_config(j, c, "config.json"); })
                .find("describes a llama model"), std::string::npos);
  j = nlohmann::json::parse(hf_config_json(c));
  j["activation_function"] = "relu";
  j["tie_word_embeddings"] = false;
  const std::string e = testsupport::error_of([&] { check_hf_config(j, c, "config.json"); });
  EXPECT_NE(e.find("activation_function = \"relu\""), std::string::npos) << e;
  EXPECT_NE(e.find("tie_word_embeddings = false"), std::string::npos) << e;
  j = nlohmann::json::parse(hf_config_json(c));
  j.erase("n_embd");
  EXPECT_NE(testsupport::error_of([&] { check_hf_config(j, c, "config.json"); })
                .find("\"n_embd\" is missing"), std::string::npos);
}

TEST(HfImport, FolderProblemsAreNamed) {
  const nn::GptConfig c = tiny();
  const fs::path d = temp_dir("hf-folders");
  EXPECT_NE(import_error(d / "nope", c).find("no such folder"), std::string::npos);
  fs::create_directories(d / "run/checkpoints");
  write_model(d / "run/checkpoints/step_00000010", c, nn::gpt_init_params(c, 1));
  atomic_write_file((d / "run/checkpoints/step_00000010/COMPLETE").string(), "10\n");
  std::string e = import_error(d / "run", c);
  EXPECT_NE(e.find("is not a model folder (no config.json): give a checkpoint folder, e.g. '" +
                   (d / "run/checkpoints/step_00000010").string()),
            std::string::npos) << e;
  fs::create_directories(d / "empty");
  atomic_write_file((d / "empty/config.json").string(), hf_config_json(c));
  e = import_error(d / "empty", c);
  EXPECT_NE(e.find("has config.json but no weights"), std::string::npos) << e;
}

}  // namespace

