// A Hugging Face tokenizer.json (data/hf_tokenizer_json.h). A file that loads must give a
// tokenizer whose ids lie in its vocabulary and whose decode(encode(text)) is the text, as
// byte-level BPE promises (added tokens decode to their own text).
#pragma once
#include "../fuzz_support.h"
#include "aiscale/data/hf_tokenizer_json.h"

namespace aiscale::fuzz {

inline int fuzz_hf_tokenizer_json(const uint8_t* data, size_t size) {
  const std::filesystem::path path = scratch_dir() / "tokenizer.json";
  write_bytes(path, as_text(data, size));
  return expect_user_errors([&] {
    data::BpeTokenizer tokenizer(data::load_hf_tokenizer_json(path));
    static const std::string text =
        "Hello world, it's 2026!\n\n  The quick brown fox <|endoftext|> HE'LL na\xc3\xafve "
        "caf\xc3\xa9 \xe6\x97\xa5\xe6\x9c\xac \xf0\x9f\x99\x82 12345 <|begin_of_text|>\r\n\x01\xff";
    std::vector<int32_t> ids;
    tokenizer.encode_append(text, ids);
    for (int32_t id : ids)
      if (id < 0 || id >= tokenizer.vocab_size()) invariant_broken("an encoded id lies outside the vocabulary");
    if (tokenizer.eot() < 0 || tokenizer.eot() >= tokenizer.vocab_size())
      invariant_broken("the boundary token lies outside the vocabulary");
    if (tokenizer.decode(ids) != text) invariant_broken("decode(encode(text)) differs from the text");
  });
}

}  // namespace aiscale::fuzz
