// The GPT-2 tokenizer's vocabulary files (data/tokenizer.h): encoder.json and vocab.bpe,
// separated by a "--8<--" line. A vocabulary that loads must encode text that decodes to
// the same bytes, as byte-level BPE promises.
#pragma once
#include "../fuzz_support.h"
#include "aiscale/data/tokenizer.h"

namespace aiscale::fuzz {

inline int fuzz_gpt2_vocab(const uint8_t* data, size_t size) {
  const std::vector<std::string> parts = split_parts(as_text(data, size), 2);
  const std::filesystem::path dir = scratch_dir() / "gpt2";
  std::filesystem::create_directories(dir);
  write_bytes(dir / "encoder.json", parts[0]);
  write_bytes(dir / "vocab.bpe", parts[1]);
  return expect_user_errors([&] {
    data::BpeTokenizer tokenizer(data::load_gpt2_vocabulary(dir));
    static const std::string text =
        "Hello world, it's 2026!\n  The quick brown fox <|endoftext|> na\xc3\xafve caf\xc3\xa9 "
        "\xe6\x97\xa5\xe6\x9c\xac \xf0\x9f\x99\x82 \x01\xff";
    std::vector<int32_t> ids;
    tokenizer.encode_append(text, ids);
    for (int32_t id : ids)
      if (id < 0 || id >= tokenizer.vocab_size()) invariant_broken("an encoded id lies outside the vocabulary");
    if (tokenizer.decode(ids) != text) invariant_broken("decode(encode(text)) differs from the text");
  });
}

}  // namespace aiscale::fuzz
