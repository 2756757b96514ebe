// tokenizer.json -> BpeVocabulary; see hf_tokenizer_json.h.
#include "aiscale/data/hf_tokenizer_json.h"

#include <algorithm>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "aiscale/core/error.h"
#include "aiscale/core/validate.h"
#include "aiscale/data/byte_level.h"
#include "aiscale/data/llama3_pretokenize.h"

namespace aiscale::data {
namespace {

using nlohmann::json;

// GPT-2's pattern as tokenizer.json files spell it in a Split pre-tokenizer.
constexpr std::string_view kGpt2Pattern =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

constexpr std::string_view kSupported =
    "aiscale reads byte-level BPE tokenizer.json files: model.type \"BPE\", no normalizer, "
    "pre_tokenizer ByteLevel or Sequence[Split(GPT-2's or Llama 3's pattern), "
    "ByteLevel(use_regex=false)]; for a SentencePiece-style model give its tokenizer.model "
    "(--tokenizer PATH.model) instead";

struct Reader {
  std::string file;

  [[noreturn]] void bad(std::string_view field, std::string_view what) const {
    fail("tokenizer file {}: {} {}; {}", file, field, what, kSupported);
  }

  // A field that must be absent, null or equal to `allowed`.
  void expect(const json& parent, const char* key, std::string_view field, const json& allowed) const {
    if (!parent.contains(key) || parent[key].is_null() || parent[key] == allowed) return;
    bad(field, fmt::format("is {}, only {} is supported", parent[key].dump(), allowed.dump()));
  }

  // The pre-tokenizer that a pre_tokenizer object amounts to.
  PreTokenizer pre_tokenizer(const json& pre) const {
    if (!pre.is_object()) bad("pre_tokenizer", "is missing (byte-level BPE needs ByteLevel)");
    const std::string type = pre.value("type", "");
    if (type == "ByteLevel") {
      expect(pre, "add_prefix_space", "pre_tokenizer.add_prefix_space", false);
      expect(pre, "use_regex", "pre_tokenizer.use_regex", true);
      return PreTokenizer::gpt2;
    }
    if (type != "Sequence")
      bad("pre_tokenizer.type", fmt::format("is \"{}\"", type));
    const json& steps = pre.contains("pretokenizers") ? pre["pretokenizers"] : json();
    if (!steps.is_array() || steps.size() != 2 || steps[0].value("type", "") != "Split" ||
        steps[1].value("type", "") != "ByteLevel")
      bad("pre_tokenizer.pretokenizers", fmt::format("is {}, expected [Split, ByteLevel]",
                                                     steps.dump().substr(0, 300)));
    const json& split = steps[0];
    const json& byte_level = steps[1];
    expect(byte_level, "add_prefix_space", "pre_tokenizer.pretokenizers[1].add_prefix_space", false);
    if (byte_level.value("use_regex", true))
      bad("pre_tokenizer.pretokenizers[1].use_regex", "is true after a Split (it would split twice)");
    expect(split, "behavior", "pre_tokenizer.pretokenizers[0].behavior", "Isolated");
    expect(split, "invert", "pre_tokenizer.pretokenizers[0].invert", false);
    const json& pattern = split.contains("pattern") ? split["pattern"] : json();
    const std::string regex =
        pattern.is_object() && pattern.contains("Regex") && pattern["Regex"].is_string()
            ? pattern["Regex"].get<std::string>()
            : std::string();
    if (regex == kLlama3Pattern) return PreTokenizer::llama3;
    if (regex == kGpt2Pattern) return PreTokenizer::gpt2;
    bad("pre_tokenizer.pretokenizers[0].pattern",
        fmt::format("is {}, not one of the two patterns implemented (GPT-2's {} and Llama 3's {})",
                    pattern.dump().substr(0, 300), kGpt2Pattern, kLlama3Pattern));
  }
};

std::string read_text(const std::filesystem::path& path) {
  validate::regular_file(path.string(), "tokenizer file");
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("cannot read tokenizer file {}: check the path and its permissions", path.string());
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

}  // namespace

std::shared_ptr<const BpeVocabulary> load_hf_tokenizer_json(const std::filesystem::path& path,
                                                            const std::string& eot) {
  const Reader r{path.string()};
  json root;
  try {
    root = json::parse(read_text(path));
  } catch (const json::exception& e) {
    fail("tokenizer file {} is not valid JSON ({}); give the tokenizer.json of a Hugging Face "
         "model", path.string(), e.what());
  }
  if (!root.is_object() || !root.contains("model") || !root["model"].is_object())
    r.bad("model", "is missing (is this a Hugging Face tokenizer.json?)");
  const json& model = root["model"];
  if (model.contains("type") && model["type"] != "BPE")
    r.bad("model.type", fmt::format("is {}", model["type"].dump()));
  r.expect(model, "dropout", "model.dropout", 0.0);
  r.expect(model, "byte_fallback", "model.byte_fallback", false);
  r.expect(model, "continuing_subword_prefix", "model.continuing_subword_prefix", "");
  r.expect(model, "end_of_word_suffix", "model.end_of_word_suffix", "");
  if (root.contains("normalizer") && !root["normalizer"].is_null() &&
      !(root["normalizer"].value("type", "") == "Sequence" &&
        root["normalizer"].value("normalizers", json::array()).empty()))
    r.bad("normalizer", fmt::format("is {}", root["normalizer"].dump().substr(0, 200)));

  auto vocab = std::make_shared<BpeVocabulary>();
  vocab->name = path.string();
  vocab->pretokenizer = r.pre_tokenizer(root.value("pre_tokenizer", json()));
  vocab->ignore_merges = model.value("ignore_merges", false);

  // added_tokens: ids may lie beyond model.vocab (Llama 3's 128000..128255).
  std::unordered_map<std::string, int32_t> added;
  int64_t size = 0;
  if (root.contains("added_tokens") && !root["added_tokens"].is_null()) {
    if (!root["added_tokens"].is_array()) r.bad("added_tokens", "is not a list");
    for (const json& t : root["added_tokens"]) {
      if (!t.is_object() || !t.contains("id") || !t["id"].is_number_integer() ||
          !t.contains("content") || !t["content"].is_string() || t["content"].get<std::string>().empty())
        r.bad("added_tokens", fmt::format("holds {}, expected {{\"id\": N, \"content\": \"...\"}}",
                                          t.dump().substr(0, 200)));
      const int64_t id = t["id"].get<int64_t>();
      if (id < 0 || id >= (int64_t{1} << 31) - 1)
        r.bad("added_tokens", fmt::format("holds id {}", id));
      added[t["content"].get<std::string>()] = static_cast<int32_t>(id);
      size = std::max(size, id + 1);
    }
  }
  const json& vocab_json = model.contains("vocab") ? model["vocab"] : json();
  if (!vocab_json.is_object() || vocab_json.empty())
    r.bad("model.vocab", "is missing or empty (expected an object mapping tokens to ids)");
  for (const auto& [token, id] : vocab_json.items()) {
    if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() >= (int64_t{1} << 31) - 1)
      r.bad("model.vocab", fmt::format("gives token '{}' the id {}", token, id.dump()));
    size = std::max(size, id.get<int64_t>() + 1);
  }
  vocab->token_bytes.resize(static_cast<size_t>(size));
  std::vector<bool> seen(static_cast<size_t>(size), false);
  std::unordered_map<std::string, int32_t> id_of;  // bytes -> id of model.vocab's tokens
  id_of.reserve(vocab_json.size());
  std::string bytes;
  for (const auto& [token, id_json] : vocab_json.items()) {
    const auto id = static_cast<int32_t>(id_json.get<int64_t>());
    if (seen[id]) r.bad("model.vocab", fmt::format("gives the id {} to two tokens", id));
    seen[id] = true;
    if (const auto a = added.find(token); a != added.end() && a->second == id) {
      vocab->token_bytes[id] = token;  // a special token listed in the vocabulary too
      continue;
    }
    if (!byte_level_to_bytes(token, bytes))
      r.bad("model.vocab", fmt::format("holds the token '{}', which is not in the byte-level "
                                       "alphabet", token));
    vocab->token_bytes[id] = bytes;
    id_of.emplace(bytes, id);
  }
  for (const auto& [text, id] : added) {
    if (seen[id] && vocab->token_bytes[id] != text)
      r.bad("added_tokens", fmt::format("gives '{}' the id {}, which model.vocab uses for "
                                        "another token", text, id));
    seen[id] = true;
    vocab->token_bytes[id] = text;
    vocab->specials.push_back({text, id});
  }
  std::sort(vocab->specials.begin(), vocab->specials.end(), [](const auto& a, const auto& b) {
    return a.text.size() != b.text.size() ? a.text.size() > b.text.size() : a.text < b.text;
  });
  for (int b = 0; b < 256; ++b) {
    const auto it = id_of.find(std::string(1, static_cast<char>(b)));
    if (it == id_of.end())
      r.bad("model.vocab", fmt::format("lacks the single-byte token of byte {} (byte-level BPE "
                                       "needs all 256)", b));
    vocab->byte_token[b] = it->second;
  }

  const json& merges = model.contains("merges") ? model["merges"] : json();
  if (!merges.is_array()) r.bad("model.merges", "is missing (expected a list)");
  vocab->merges.reserve(merges.size());
  std::string left, right;
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    const json& m = merges[rank];
    bool ok = false;
    if (m.is_string()) {  // "left right"
      const std::string& s = m.get_ref<const std::string&>();
      const size_t space = s.find(' ');
      ok = space != std::string::npos && s.find(' ', space + 1) == std::string::npos &&
           byte_level_to_bytes(std::string_view(s).substr(0, space), left) &&
           byte_level_to_bytes(std::string_view(s).substr(space + 1), right);
    } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
      ok = byte_level_to_bytes(m[0].get_ref<const std::string&>(), left) &&
           byte_level_to_bytes(m[1].get_ref<const std::string&>(), right);
    }
    const auto find = [&](const std::string& s) {
      const auto it = id_of.find(s);
      return it == id_of.end() ? -1 : it->second;
    };
    const int32_t ids[3] = {ok ? find(left) : -1, ok ? find(right) : -1, ok ? find(left + right) : -1};
    if (ids[0] < 0 || ids[1] < 0 || ids[2] < 0)
      r.bad(fmt::format("model.merges[{}]", rank),
            fmt::format("is {}, not a merge of two tokens of model.vocab into a third",
                        m.dump().substr(0, 200)));
    vocab->merges.insert(ids[0], ids[1], BpeVocabulary::Merge{static_cast<int32_t>(rank), ids[2]});
  }
  if (vocab->ignore_merges) vocab->whole_tokens = std::move(id_of);

  // The document-boundary token.
  static constexpr std::string_view kBoundaries[] = {"<|endoftext|>", "<|begin_of_text|>",
                                                      "<|end_of_text|>", "<s>", "</s>"};
  if (!eot.empty()) {
    const auto it = added.find(eot);
    if (it == added.end())
      fail("--eot '{}' is not one of the added tokens of {}; name one of them (e.g. {})", eot,
           path.string(), added.empty() ? std::string("none: the file has no added_tokens")
                                        : added.begin()->first);
    vocab->eot = it->second;
  } else {
    for (std::string_view name : kBoundaries)
      if (const auto it = added.find(std::string(name)); it != added.end()) {
        vocab->eot = it->second;
        break;
      }
    if (vocab->eot < 0)
      fail("tokenizer file {}: added_tokens holds none of <|endoftext|>, <|begin_of_text|>, "
           "<|end_of_text|>, <s>, </s>; name the document-boundary token with --eot TOKEN",
           path.string());
  }
  return vocab;
}

}  // namespace aiscale::data
