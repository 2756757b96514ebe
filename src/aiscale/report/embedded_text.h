// A text file built into the binary: the source that cmake/embed_text_files.cmake writes
// into the build folder holds such files as an array of these.
#pragma once

namespace aiscale::report {

struct EmbeddedTextFile {
  const char* name;  // the file's name without its extension
  const char* text;
};

}  // namespace aiscale::report
