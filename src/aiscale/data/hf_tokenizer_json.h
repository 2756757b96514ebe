// Hugging Face tokenizer.json files with a byte-level BPE model (GPT-2, Llama 3 and
// similar), loaded into the BpeVocabulary that BpeTokenizer runs.
#pragma once
#include <filesystem>
#include <memory>
#include <string>

#include "aiscale/data/tokenizer.h"

namespace aiscale::data {

// Reads `path`. Supported: model.type "BPE" (or absent) with `vocab` (token -> id, in
// GPT-2's byte-to-unicode alphabet) and `merges` ("left right" strings or [left, right]
// pairs, in rank order), model.ignore_merges; `added_tokens` (matched in the text before
// pre-tokenization); no normalizer; pre_tokenizer ByteLevel (use_regex true: GPT-2's
// pattern) or a Sequence of Split(GPT-2's or Llama 3's pattern, behavior Isolated) and
// ByteLevel(use_regex false). `eot` names the document-boundary token (empty: the first
// of <|endoftext|>, <|begin_of_text|>, <|end_of_text|>, <s>, </s>). Anything else is an
// aiscale::Error naming the file, the field and what is supported.
std::shared_ptr<const BpeVocabulary> load_hf_tokenizer_json(const std::filesystem::path& path,
                                                            const std::string& eot = {});

}  // namespace aiscale::data
