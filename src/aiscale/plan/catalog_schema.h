// Checks one systems-catalogue TOML file against the catalogue's schema (catalog_schema.cpp):
// every key known for its table and of the right type, every entry with an id, every access
// call naming its programme and sources. Used by load_catalog (catalog.cpp) on each file
// before the files are merged.
#pragma once
#include <string>

#include <toml++/toml.h>

namespace aiscale::plan {

// Throws Error naming the file, the entry, the key and its line for an unknown key, a
// value of the wrong type, an entry without an id or an access call without its sources.
void validate_catalog_file(const toml::table& root, const std::string& file);

}  // namespace aiscale::plan
