// The message of the aiscale::Error a call throws ("" when it throws none), for tests that
// check what an error says.
#pragma once
#include <functional>
#include <string>

#include "aiscale/core/error.h"

namespace aiscale::testsupport {

inline std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace aiscale::testsupport
