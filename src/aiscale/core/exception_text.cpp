#include "aiscale/core/exception_text.h"

#include <filesystem>
#include <new>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "aiscale/core/error.h"

namespace aiscale {

ExceptionText describe_exception(const std::exception_ptr& e) {
  if (!e) return {"unknown error", 2};
  try {
    std::rethrow_exception(e);
  } catch (const Error& x) {
    return {x.what(), 1};
  } catch (const std::bad_alloc&) {
    return {"out of memory: the model, batch or data asked for more memory than this machine "
            "has; use a smaller model, train.batch_size or train.seq_len", 1};
  } catch (const std::filesystem::filesystem_error& x) {
    return {fmt::format("file system error on '{}'{}: {}; check the path, its permissions and "
                        "the free space", x.path1().string(),
                        x.path2().empty() ? "" : " -> '" + x.path2().string() + "'",
                        x.code().message()), 1};
  } catch (const nlohmann::json::exception& x) {
    return {fmt::format("malformed JSON in an input file: {}", x.what()), 1};
  } catch (const ReportedFailure& x) {
    return {x.what(), x.exit_code()};
  } catch (const std::exception& x) {
    return {x.what(), 2};
  } catch (...) {
    return {"unknown error (not a std::exception)", 2};
  }
}

}  // namespace aiscale
