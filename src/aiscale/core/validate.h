// One place that checks every number, count, size and path aiscale takes from outside:
// a config key, a command-line option, an environment variable or a file it reads back.
// Each check names where the value came from (`source`: "run.toml: train.lr",
// "--threads", "environment variable OMP_NUM_THREADS", "ckpt/state.json: step") and what
// to do, and refuses NaN and infinities before any range test (a NaN compares false with
// every bound, so `v < min` alone lets it through).
#pragma once
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <string_view>

namespace aiscale::validate {

// The most CPU threads aiscale hands to OpenMP/BLAS, and the largest number of bytes one
// buffer sized from outside input may take (1 TiB: more than any host or GPU holds).
inline constexpr int64_t kMaxThreads = 1024;
inline constexpr uint64_t kMaxBufferBytes = uint64_t{1} << 40;

// A bound as a person writes it: 1000000 -> "1000000", 1099511627776 -> "2^40",
// 1.7976931348623157e308 -> "any" (no bound), 0.001 -> "0.001".
std::string bound_text(double v);
std::string bound_text(int64_t v);
// The same for the upper end of an integer range, where the largest int64 is written out
// (bound_text calls it "any", but a value beyond it is still out of range).
std::string upper_bound_text(int64_t v);

// v must be finite: NaN and +-inf are refused, naming source and fix.
double finite(double v, std::string_view source, std::string_view fix = {});
// lo <= v <= hi (and finite). `fix` says what to do; empty: "use a value in [lo, hi]".
double in_range(double v, double lo, double hi, std::string_view source, std::string_view fix = {});
int64_t in_range(int64_t v, int64_t lo, int64_t hi, std::string_view source, std::string_view fix = {});
// A thread count for OpenMP/BLAS: 0 (= automatic) to kMaxThreads.
int64_t thread_count(int64_t v, std::string_view source);
// count * element_bytes without overflow and at most kMaxBufferBytes; returns the bytes.
uint64_t buffer_bytes(uint64_t count, uint64_t element_bytes, std::string_view source);
// a * b without int64 overflow (negative inputs refused).
int64_t checked_product(int64_t a, int64_t b, std::string_view source);

// Text to numbers for options and environment variables: the whole text must be a
// number ("12abc", "", "1e999" refused), the result finite and in range. Digits that do
// not fit 64 bits are "out of range" (with the range), not "not an integer".
int64_t parse_int(std::string_view text, int64_t lo, int64_t hi, std::string_view source);
// What parse_int would say of `text`, without throwing: beyond_64_bits for digits that do
// not fit an int64 at all.
enum class IntText { ok, not_integer, too_small, too_large, beyond_64_bits };
IntText classify_int(std::string_view text, int64_t lo, int64_t hi);
// Whether `text` is written as a whole number ([+-]digits, TOML's '_' between digits
// allowed), whatever its size: for telling "too large for 64 bits" from "not a number".
bool looks_integer(std::string_view text);
// "config key 'train.steps' = 99999999999999999999 is out of range: it must be between 1
// and 2^40" style text for a value written as an integer that does not fit 64 bits.
std::string out_of_range_text(std::string_view source, std::string_view text, int64_t lo, int64_t hi);
double parse_real(std::string_view text, double lo, double hi, std::string_view source);
// An environment variable as an integer in [lo, hi]; nullopt when unset or empty.
std::optional<int64_t> env_int(const char* name, int64_t lo, int64_t hi);

// OMP_NUM_THREADS, when set, must be a thread count (its first entry, for the nested
// "4,2" form): libgomp itself only warns and goes on with a default.
void omp_num_threads_env();

// The path must exist and be a regular file (or a symlink to one): a FIFO, device,
// socket or directory given as an input is refused instead of blocking or failing later.
// `what` names the input ("config file", "token shard", "--config").
void regular_file(const std::string& path, std::string_view what);
// The path must be an existing directory.
void directory(const std::string& path, std::string_view what);

}  // namespace aiscale::validate
