// The one-line message and exit status of an exception as the CLI reports it: a user
// mistake (Error) names its input and fix; out-of-memory, file-system and JSON errors get a
// sentence that says what to check. Shared by main() and by ranks that report their own
// failure before their communicator goes (parallel/rank_failure.h).
#pragma once
#include <exception>
#include <string>

namespace aiscale {

struct ExceptionText {
  std::string message;
  int exit_code = 1;  // 1: an error the message explains; 2: an unexpected exception
};

// Of the exception `e` (nullptr: "unknown error").
ExceptionText describe_exception(const std::exception_ptr& e);

// Thrown by a rank whose failure has already been printed and recorded: main() exits with
// `exit_code` without printing it again.
class ReportedFailure : public std::exception {
 public:
  explicit ReportedFailure(int exit_code) : exit_code_(exit_code) {}
  int exit_code() const { return exit_code_; }
  const char* what() const noexcept override { return "failure already reported"; }

 private:
  int exit_code_;
};

}  // namespace aiscale
