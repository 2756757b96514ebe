// GPT-2's byte-to-unicode alphabet: byte-level BPE vocabularies (GPT-2's encoder.json,
// a tokenizer.json with a ByteLevel pre-tokenizer) spell every byte as a printable code
// point so that tokens hold no spaces or control characters. Loaders undo it once.
#pragma once
#include <string>
#include <string_view>

namespace aiscale::data {

// A token as spelled in the vocabulary -> its raw bytes. False when a code point is
// outside the alphabet (then `bytes` is unspecified).
bool byte_level_to_bytes(std::string_view mapped, std::string& bytes);

// Raw bytes -> the vocabulary's spelling (the inverse; for writing vocabulary files).
std::string bytes_to_byte_level(std::string_view bytes);

}  // namespace aiscale::data
