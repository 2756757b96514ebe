// SentencePiece through libsentencepiece; see sentencepiece_tokenizer.h.
#include "aiscale/data/sentencepiece_tokenizer.h"

#include "aiscale/core/error.h"
#include "aiscale/core/validate.h"

#ifdef AISCALE_HAVE_SENTENCEPIECE
#include <sentencepiece_processor.h>
#endif

namespace aiscale::data {

#ifdef AISCALE_HAVE_SENTENCEPIECE
namespace {

// The processor is immutable once loaded and its Encode/Decode are const, so clones
// share it.
class SentencePieceTokenizer final : public Tokenizer {
 public:
  SentencePieceTokenizer(std::string name, std::shared_ptr<const sentencepiece::SentencePieceProcessor> sp,
                         int32_t eot)
      : name_(std::move(name)), sp_(std::move(sp)), eot_(eot) {}

  std::string name() const override { return name_; }

  void encode_append(std::string_view text, std::vector<int32_t>& out) override {
    ids_.clear();
    const auto status = sp_->Encode(text, &ids_);
    if (!status.ok()) fail("SentencePiece model {} cannot encode a text: {}", name_, status.ToString());
    out.insert(out.end(), ids_.begin(), ids_.end());
  }

  // Control pieces (<s>, </s>) are written as their text; runs of other ids go through
  // the model's decoder (which undoes its whitespace marker).
  std::string decode(std::span<const int32_t> ids) const override {
    std::string text, piece_text;
    std::vector<int> run;
    const auto flush = [&] {
      if (run.empty()) return;
      const auto status = sp_->Decode(run, &piece_text);
      if (!status.ok()) fail("SentencePiece model {} cannot decode: {}", name_, status.ToString());
      text += piece_text;
      run.clear();
    };
    for (int32_t id : ids) {
      if (id < 0 || id >= vocab_size())
        fail("token id {} is outside the vocabulary [0, {}) of SentencePiece model {}; were these "
             "ids made with another tokenizer?", id, vocab_size(), name_);
      if (sp_->IsControl(id)) {
        flush();
        text += sp_->IdToPiece(id);
      } else {
        run.push_back(id);
      }
    }
    flush();
    return text;
  }

  int32_t vocab_size() const override { return sp_->GetPieceSize(); }
  int32_t eot() const override { return eot_; }
  std::unique_ptr<Tokenizer> clone() const override {
    return std::make_unique<SentencePieceTokenizer>(name_, sp_, eot_);
  }

 private:
  std::string name_;
  std::shared_ptr<const sentencepiece::SentencePieceProcessor> sp_;
  int32_t eot_;
  std::vector<int> ids_;  // scratch
};

}  // namespace

bool sentencepiece_compiled() { return true; }

std::unique_ptr<Tokenizer> make_sentencepiece_tokenizer(const std::filesystem::path& path,
                                                        const std::string& eot) {
  validate::regular_file(path.string(), "SentencePiece model");
  auto sp = std::make_shared<sentencepiece::SentencePieceProcessor>();
  if (const auto status = sp->Load(path.string()); !status.ok())
    fail("cannot load SentencePiece model {}: {}; give a *.model file written by spm_train (or "
         "a model's tokenizer.model)", path.string(), status.ToString());
  int32_t boundary = -1;
  if (!eot.empty()) {
    boundary = sp->PieceToId(eot);
    if (boundary == sp->unk_id() && eot != sp->IdToPiece(sp->unk_id()))
      fail("--eot '{}' is not a piece of SentencePiece model {}; name one of its pieces, e.g. "
           "{}", eot, path.string(), sp->IdToPiece(sp->bos_id() >= 0 ? sp->bos_id() : 0));
  } else {
    boundary = sp->bos_id() >= 0 ? sp->bos_id() : sp->eos_id();
    if (boundary < 0)
      fail("SentencePiece model {} has neither a BOS nor an EOS piece; name the "
           "document-boundary piece with --eot PIECE", path.string());
  }
  return std::make_unique<SentencePieceTokenizer>(path.string(), std::move(sp), boundary);
}

#else

bool sentencepiece_compiled() { return false; }

std::unique_ptr<Tokenizer> make_sentencepiece_tokenizer(const std::filesystem::path& path,
                                                        const std::string&) {
  fail("cannot read SentencePiece model {}: this aiscale was built without libsentencepiece; "
       "install it (apt package libsentencepiece-dev, or bash scripts/setup.sh) and rebuild",
       path.string());
}

#endif

}  // namespace aiscale::data
