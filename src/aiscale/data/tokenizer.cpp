// The byte tokenizer, the tokenizer factory and where the GPT-2 vocabulary lives.
#include "aiscale/data/tokenizer.h"

#include <cstdlib>

#include "aiscale/core/env.h"
#include "aiscale/core/error.h"
#include "aiscale/core/paths.h"

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

std::unique_ptr<Tokenizer> make_tokenizer(std::string_view name,
                                          const std::filesystem::path& vocab_dir) {
  if (name == "byte") return std::make_unique<ByteTokenizer>();
  if (name == "gpt2")
    return std::make_unique<Gpt2Tokenizer>(vocab_dir.empty() ? default_gpt2_vocab_dir() : vocab_dir);
  fail("unknown tokenizer '{}': choose 'gpt2' (GPT-2 byte-level BPE) or 'byte' (one token "
       "per byte, vocabulary 256)", name);
}

}  // namespace aiscale::data
