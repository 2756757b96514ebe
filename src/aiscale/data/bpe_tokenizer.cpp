// Byte-level BPE: the merge table, encoding (special tokens, pre-tokenization, merges)
// and decoding.
//
// Vocabularies spell tokens in GPT-2's byte-to-unicode alphabet (byte_level.h); the
// loaders undo that mapping, so from here on a token is raw bytes and a merge is a pair
// of ids: BPE repeatedly merges the adjacent pair of lowest rank.
#include <algorithm>
#include <climits>

#include "aiscale/core/error.h"
#include "aiscale/data/gpt2_pretokenize.h"
#include "aiscale/data/llama3_pretokenize.h"
#include "aiscale/data/tokenizer.h"

namespace aiscale::data {
namespace {

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

void BpeVocabulary::MergeTable::reserve(size_t count) {
  AISCALE_CHECK(size_ == 0, "reserve on a filled merge table");
  size_t capacity = 16;
  while (capacity < 2 * count) capacity *= 2;  // load factor <= 1/2
  slots_.assign(capacity, Slot{});
  mask_ = capacity - 1;
}

size_t BpeVocabulary::MergeTable::slot_of(uint64_t key) const {
  size_t slot = mix64(key) & mask_;
  while (slots_[slot].key != kEmpty && slots_[slot].key != key) slot = (slot + 1) & mask_;
  return slot;
}

void BpeVocabulary::MergeTable::insert(int32_t left, int32_t right, Merge merge) {
  AISCALE_CHECK(2 * (size_ + 1) <= slots_.size(), "merge table over capacity ({})", size_);
  const uint64_t key = pair_key(left, right);
  Slot& slot = slots_[slot_of(key)];
  if (slot.key == key) return;
  slot = Slot{key, merge};
  ++size_;
}

const BpeVocabulary::Merge* BpeVocabulary::MergeTable::find(int32_t left, int32_t right) const {
  if (slots_.empty()) return nullptr;
  const uint64_t key = pair_key(left, right);
  const Slot& slot = slots_[slot_of(key)];
  return slot.key == key ? &slot.merge : nullptr;
}

BpeTokenizer::BpeTokenizer(const std::filesystem::path& vocab_dir)
    : BpeTokenizer(load_gpt2_vocabulary(vocab_dir)) {}

BpeTokenizer::BpeTokenizer(std::shared_ptr<const BpeVocabulary> vocabulary)
    : vocab_(std::move(vocabulary)) {
  AISCALE_CHECK(vocab_ != nullptr, "BpeTokenizer needs a vocabulary");
  for (const auto& special : vocab_->specials)
    if (!special.text.empty()) special_start_[static_cast<unsigned char>(special.text[0])] = true;
}

std::unique_ptr<Tokenizer> BpeTokenizer::clone() const {
  return std::make_unique<BpeTokenizer>(vocab_);
}

void BpeTokenizer::encode_piece(std::string_view piece, std::vector<int32_t>& out) {
  if (piece.size() == 1) {
    out.push_back(vocab_->byte_token[static_cast<unsigned char>(piece[0])]);
    return;
  }
  if (const auto hit = cache_.find(piece); hit != cache_.end()) {
    out.insert(out.end(), hit->second.begin(), hit->second.end());
    return;
  }
  std::vector<int32_t>& word = word_;
  word.clear();
  const auto whole = vocab_->ignore_merges ? vocab_->whole_tokens.find(std::string(piece))
                                           : vocab_->whole_tokens.end();
  if (whole != vocab_->whole_tokens.end()) {
    word.push_back(whole->second);
  } else {
    // Start from single bytes; repeatedly merge every occurrence (left to right) of the
    // adjacent pair with the lowest rank, until no adjacent pair is a merge.
    for (char c : piece) word.push_back(vocab_->byte_token[static_cast<unsigned char>(c)]);
    const auto& merges = vocab_->merges;
    while (word.size() > 1) {
      int32_t best_rank = INT32_MAX;
      BpeVocabulary::Merge best{};
      int32_t best_left = -1, best_right = -1;
      for (size_t i = 0; i + 1 < word.size(); ++i) {
        const BpeVocabulary::Merge* merge = merges.find(word[i], word[i + 1]);
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
  }
  out.insert(out.end(), word.begin(), word.end());
  if (cache_.size() >= kMaxCacheEntries) cache_.clear();
  cache_.emplace(std::string(piece), word);
}

void BpeTokenizer::encode_plain(std::string_view text, std::vector<int32_t>& out) {
  pieces_.clear();
  if (vocab_->pretokenizer == PreTokenizer::gpt2)
    gpt2_pretokenize(text, pieces_);
  else
    llama3_pretokenize(text, pieces_);
  for (std::string_view piece : pieces_) encode_piece(piece, out);
}

void BpeTokenizer::encode_append(std::string_view text, std::vector<int32_t>& out) {
  if (vocab_->specials.empty()) {
    encode_plain(text, out);
    return;
  }
  // Special tokens are cut out first, leftmost then longest (specials are sorted longest
  // first), and the text between them is encoded as usual.
  size_t plain_start = 0;
  for (size_t pos = 0; pos < text.size(); ++pos) {
    if (!special_start_[static_cast<unsigned char>(text[pos])]) continue;
    const std::string_view rest = text.substr(pos);
    for (const auto& special : vocab_->specials) {
      if (!rest.starts_with(special.text)) continue;
      encode_plain(text.substr(plain_start, pos - plain_start), out);
      out.push_back(special.id);
      pos += special.text.size() - 1;
      plain_start = pos + 1;
      break;
    }
  }
  encode_plain(text.substr(plain_start), out);
}

std::string BpeTokenizer::decode(std::span<const int32_t> ids) const {
  std::string text;
  for (int32_t id : ids) {
    if (id < 0 || id >= vocab_size())
      fail("token id {} is outside the vocabulary [0, {}) of tokenizer {}; were these ids made "
           "with another tokenizer?", id, vocab_size(), name());
    text += vocab_->token_bytes[id];
  }
  return text;
}

}  // namespace aiscale::data
