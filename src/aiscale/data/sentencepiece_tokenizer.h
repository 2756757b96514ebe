// SentencePiece models (*.model, e.g. Llama 2's tokenizer.model or one trained with
// spm_train) through Debian's libsentencepiece.
#pragma once
#include <filesystem>
#include <memory>
#include <string>

#include "aiscale/data/tokenizer.h"

namespace aiscale::data {

// Whether this build links libsentencepiece (CMake finds it with pkg-config; Debian's
// libsentencepiece-dev, installed by scripts/setup.sh).
bool sentencepiece_compiled();

// Loads the model at `path`. The document-boundary token is the piece named `eot` if
// given, else the model's BOS piece, else its EOS piece. Throws aiscale::Error naming
// the file (and, in a build without the library, the package to install).
std::unique_ptr<Tokenizer> make_sentencepiece_tokenizer(const std::filesystem::path& path,
                                                        const std::string& eot = {});

}  // namespace aiscale::data
