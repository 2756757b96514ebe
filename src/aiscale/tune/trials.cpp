// Turning a search space into trials: the grid's points in order, or seeded random draws.
#include <cmath>

#include "aiscale/core/error.h"
#include "aiscale/core/rng.h"
#include "aiscale/tune/space.h"

namespace aiscale::tune {
namespace {

double uniform01(Rng& rng) { return static_cast<double>(rng.next_u64() >> 11) * 0x1.0p-53; }

Value draw(const ParamSpec& p, Rng& rng) {
  switch (p.kind) {
    case ParamKind::choice: return p.values[rng.below(p.values.size())];
    case ParamKind::integer: {
      const auto span = static_cast<uint64_t>(p.high - p.low) + 1;
      return Value{static_cast<int64_t>(p.low) + static_cast<int64_t>(rng.below(span))};
    }
    case ParamKind::uniform:
    case ParamKind::log_uniform: {
      const double u = uniform01(rng);
      const double v = p.kind == ParamKind::uniform
                           ? p.low + u * (p.high - p.low)
                           : std::exp(std::log(p.low) + u * (std::log(p.high) - std::log(p.low)));
      return Value{v};
    }
  }
  return Value{0.0};
}

// The values a parameter takes in a grid.
std::vector<Value> grid_values(const ParamSpec& p) {
  std::vector<Value> out;
  switch (p.kind) {
    case ParamKind::choice: return p.values;
    case ParamKind::integer: {
      const auto lo = static_cast<int64_t>(p.low), hi = static_cast<int64_t>(p.high);
      if (p.points > 0 && p.points < hi - lo + 1) {
        for (int64_t i = 0; i < p.points; ++i)
          out.push_back(Value{lo + (p.points == 1 ? 0 : (hi - lo) * i / (p.points - 1))});
      } else {
        for (int64_t v = lo; v <= hi; ++v) out.push_back(Value{v});
      }
      return out;
    }
    case ParamKind::uniform:
    case ParamKind::log_uniform:
      for (int64_t i = 0; i < p.points; ++i) {
        const double t = p.points == 1 ? 0.5 : static_cast<double>(i) / static_cast<double>(p.points - 1);
        // The ends exactly (exp(log(x)) is not always x); one point: the middle.
        double v = 0;
        if (p.points == 1) v = p.kind == ParamKind::uniform ? 0.5 * (p.low + p.high) : std::sqrt(p.low * p.high);
        else if (i == 0) v = p.low;
        else if (i == p.points - 1) v = p.high;
        else if (p.kind == ParamKind::uniform) v = p.low + t * (p.high - p.low);
        else v = std::exp(std::log(p.low) + t * (std::log(p.high) - std::log(p.low)));
        out.emplace_back(v);
      }
      return out;
  }
  return out;
}

}  // namespace

std::vector<Params> random_trials(const StudyConfig& c, int64_t count, uint64_t stream) {
  Rng rng(c.seed * 0x9E3779B97F4A7C15ULL + stream);
  std::vector<Params> out;
  out.reserve(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i) {
    Params p = c.fixed;
    for (const auto& spec : c.params) p[spec.name] = draw(spec, rng);
    out.push_back(std::move(p));
  }
  return out;
}

namespace {

// A train study's integer keys (train.warmup_steps, train.batch_size) searched over a
// uniform or log-uniform range take the draw rounded to the nearest integer.
std::vector<Params> rounded_to_keys(const StudyConfig& c, std::vector<Params> trials) {
  if (c.backend != Backend::train) return trials;
  for (auto& t : trials)
    for (auto& [name, v] : t)
      if (auto* d = std::get_if<double>(&v))
        for (const auto& h : c.train_keys)
          if (h.name == name && h.type == 'i') v = Value{static_cast<int64_t>(std::llround(*d))};
  return trials;
}

std::vector<Params> drawn_trials(const StudyConfig& c);

}  // namespace

std::vector<Params> make_trials(const StudyConfig& c) { return rounded_to_keys(c, drawn_trials(c)); }

namespace {

std::vector<Params> drawn_trials(const StudyConfig& c) {
  if (c.search == "random") {
    if (c.params.empty())
      fail("{}: random search needs at least one [params.NAME] section to vary", c.config_path);
    return random_trials(c, c.trials, 0);
  }
  std::vector<std::vector<Value>> axes;
  double total = 1;
  for (const auto& p : c.params) {
    axes.push_back(grid_values(p));
    total *= static_cast<double>(axes.back().size());
  }
  if (c.params.empty()) fail("{}: grid search needs at least one [params.NAME] section", c.config_path);
  if (total > 1e6)
    fail("{}: the grid has {:.3g} points, more than 1000000: use fewer points or search = \"random\"",
         c.config_path, total);
  std::vector<Params> out;
  std::vector<size_t> index(axes.size(), 0);
  for (;;) {
    Params p = c.fixed;
    for (size_t a = 0; a < axes.size(); ++a) p[c.params[a].name] = axes[a][index[a]];
    out.push_back(std::move(p));
    size_t a = axes.size();
    while (a > 0) {
      --a;
      if (++index[a] < axes[a].size()) break;
      index[a] = 0;
      if (a == 0) return out;
    }
    if (axes.empty()) return out;
  }
}

}  // namespace

}  // namespace aiscale::tune
