// The byte tokenizer, the tokenizer factory and where the GPT-2 vocabulary lives.
#include "aiscale/data/tokenizer.h"

#include <cstdlib>

#include "aiscale/core/env.h"
#include "aiscale/core/error.h"
#include "aiscale/core/paths.h"
#include "aiscale/data/hf_tokenizer_json.h"
#include "aiscale/data/sentencepiece_tokenizer.h"

namespace aiscale::data {

void ByteTokenizer::encode_append(std::string_view text, std::vector<int32_t>& out) {
  out.reserve(out.size() + text.size());
  for (char c : text) out.push_back(static_cast<unsigned char>(c));
}

std::string ByteTokenizer::decode(std::span<const int32_t> ids) const {
  std::string text;
  text.reserve(ids.size());
  for (int32_t id : ids) {
    if (id < 0 || id >= vocab_size())
      fail("token id {} is outside the byte tokenizer's vocabulary [0, 256); were these ids "
           "made with another tokenizer (try --tokenizer gpt2)?", id);
    if (id == eot())
      text += "<|endoftext|>";
    else
      text += static_cast<char>(id);
  }
  return text;
}

std::filesystem::path default_gpt2_vocab_dir() { return resolve_data_path(kGpt2Vocabulary).path; }

void check_tokenizer_spec(std::string_view spec, std::string_view what) {
  if (spec == "gpt2" || spec == "byte" || spec.ends_with(".json") || spec.ends_with(".model")) return;
  fail("{} '{}' is neither a tokenizer name nor a tokenizer file: choose {}", what, spec,
       kTokenizerChoices);
}

std::unique_ptr<Tokenizer> make_tokenizer(std::string_view spec, const TokenizerOptions& options) {
  check_tokenizer_spec(spec, "--tokenizer");
  if (spec == "byte") {
    if (!options.eot.empty())
      fail("--eot '{}': the byte tokenizer's document boundary is always byte 0; leave --eot out",
           options.eot);
    return std::make_unique<ByteTokenizer>();
  }
  if (spec == "gpt2") {
    if (!options.eot.empty() && options.eot != "<|endoftext|>")
      fail("--eot '{}': GPT-2's vocabulary has one special token, <|endoftext|>", options.eot);
    return std::make_unique<BpeTokenizer>(options.vocab_dir.empty() ? default_gpt2_vocab_dir()
                                                                    : options.vocab_dir);
  }
  const std::filesystem::path path(spec);
  if (spec.ends_with(".model")) return make_sentencepiece_tokenizer(path, options.eot);
  return std::make_unique<BpeTokenizer>(load_hf_tokenizer_json(path, options.eot));
}

std::unique_ptr<Tokenizer> make_tokenizer(std::string_view spec, const std::filesystem::path& vocab_dir) {
  return make_tokenizer(spec, TokenizerOptions{vocab_dir, {}});
}

}  // namespace aiscale::data
