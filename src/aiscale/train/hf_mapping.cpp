#include "aiscale/train/hf_mapping.h"

#include <algorithm>
#include <regex>
#include <set>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "aiscale/core/error.h"
#include "aiscale/nn/models/gpt_layout.h"

namespace aiscale::train {
namespace {

int64_t cols_of(const HfTensorMap& t) {
  int64_t cols = 1;
  for (size_t i = 1; i < t.shape.size(); ++i) cols *= t.shape[i];
  return cols;
}

std::string shape_text(const std::vector<int64_t>& s) { return fmt::format("[{}]", fmt::join(s, ", ")); }

// "2 missing tensors: a, b" (nothing when empty).
std::string listed(const std::vector<std::string>& items, const char* one, const char* many) {
  if (items.empty()) return "";
  return fmt::format("{} {}: {}", items.size(), items.size() == 1 ? one : many, fmt::join(items, "; "));
}

}  // namespace

std::vector<int64_t> hf_piece_shape(const HfTensorMap& t, const HfPiece& p) {
  std::vector<int64_t> s = t.shape;
  if (s.empty()) return s;
  s[0] = p.rows;
  if (t.transposed && s.size() == 2) std::swap(s[0], s[1]);
  return s;
}

HfImport hf_import_check(const HfModelMap& map, const HfWeights& weights, const std::string& fix) {
  // The pieces the table wants, by HF name: (tensor, first row).
  struct Want {
    const HfTensorMap* tensor;
    const HfPiece* piece;
    int64_t row0;
  };
  std::map<std::string, Want> want;
  std::vector<std::string> order;  // the table's order, for the missing list
  for (const auto& t : map.tensors) {
    int64_t row = 0;
    for (const auto& p : t.pieces) {
      want.emplace(p.name, Want{&t, &p, row});
      order.push_back(p.name);
      row += p.rows;
    }
    AISCALE_CHECK(t.shape.empty() ? row == 1 : row == t.shape[0],
                  "HF table of {}: its pieces' rows do not add up to its shape", t.param);
  }
  const auto known = [&](const std::string& n) {
    return want.count(n) || map.tied.count(n) || (map.ignored && map.ignored(n));
  };
  std::map<std::string, std::string> found;  // table name -> name in the checkpoint
  std::vector<std::string> unexpected, shapes, dtypes, twice, missing;
  for (const auto& [name, info] : weights.tensors()) {
    std::string canonical = name;
    if (!known(name))
      for (const auto& prefix : map.prefixes)
        if (name.starts_with(prefix) && known(name.substr(prefix.size()))) {
          canonical = name.substr(prefix.size());
          break;
        }
    if (!known(canonical)) {
      unexpected.push_back(name);
      continue;
    }
    if (map.ignored && map.ignored(canonical)) continue;
    std::vector<int64_t> expected_shape;
    if (auto w = want.find(canonical); w != want.end()) {
      expected_shape = hf_piece_shape(*w->second.tensor, *w->second.piece);
      if (!found.emplace(canonical, name).second) {
        twice.push_back(fmt::format("'{}' and '{}'", found.at(canonical), name));
        continue;
      }
    } else {  // tied to another tensor: its shape is that one's
      const Want& target = want.at(map.tied.at(canonical));
      expected_shape = hf_piece_shape(*target.tensor, *target.piece);
    }
    if (info.shape != expected_shape)
      shapes.push_back(fmt::format("{} is {} in the checkpoint, the model's is {}", name,
                                   shape_text(info.shape), shape_text(expected_shape)));
    if (!safetensors_dtype_readable(info.dtype)) dtypes.push_back(fmt::format("{} is {}", name, info.dtype));
  }
  for (const auto& n : order)
    if (!found.count(n)) missing.push_back(n);
  std::vector<std::string> problems;
  for (std::string p : {listed(missing, "missing tensor", "missing tensors"),
                        listed(unexpected, "unexpected tensor", "unexpected tensors"),
                        listed(shapes, "shape differs", "shapes differ"),
                        listed(dtypes, "dtype aiscale does not read (F32, BF16, F16 only)",
                               "dtypes aiscale does not read (F32, BF16, F16 only)"),
                        listed(twice, "tensor given twice", "tensors given twice")})
    if (!p.empty()) problems.push_back(std::move(p));
  if (!problems.empty())
    fail("'{}' does not fit the model ({}, {} tensors): {}. {}", weights.source(),
         map.architecture, order.size(), fmt::join(problems, ". "), fix);

  HfImport plan;
  for (const auto& p : hf_pieces(map)) plan.file_names.push_back(found.at(p.name));
  return plan;
}

void hf_import_range(const HfModelMap& map, const HfWeights& weights, const HfImport& plan,
                     int64_t begin, int64_t count, float* out) {
  const int64_t end = begin + count;
  const std::vector<HfPieceRange> pieces = hf_pieces(map);
  std::vector<float> buffer;
  for (size_t i = 0; i < pieces.size(); ++i) {
    const HfPieceRange& p = pieces[i];
    const int64_t lo = std::max(begin, p.begin), hi = std::min(end, p.begin + p.rows * p.cols);
    if (lo >= hi) continue;
    const std::string& name = plan.file_names[i];
    float* dst = out + (lo - begin);
    if (!p.transposed) {  // rows are contiguous in both: read in place
      weights.read_values(name, lo - p.begin, hi - lo, dst);
      continue;
    }
    AISCALE_CHECK((lo - p.begin) % p.cols == 0 && (hi - p.begin) % p.cols == 0,
                  "range [{}, {}) splits a row of {}", begin, end, p.name);
    const int64_t r0 = (lo - p.begin) / p.cols, rows = (hi - lo) / p.cols;
    buffer.resize(static_cast<size_t>(rows * p.cols));
    if (rows == p.rows) {
      weights.read_values(name, 0, rows * p.cols, buffer.data());
    } else {  // HF row k holds our column k: the range's part of each
      for (int64_t k = 0; k < p.cols; ++k)
        weights.read_values(name, k * p.rows + r0, rows, buffer.data() + k * rows);
    }
    for (int64_t r = 0; r < rows; ++r)  // HF (cols, rows) -> ours (rows, cols)
      for (int64_t k = 0; k < p.cols; ++k) dst[r * p.cols + k] = buffer[k * rows + r];
  }
}

std::vector<float> hf_import(const HfModelMap& map, const HfWeights& weights, const std::string& fix) {
  const HfImport plan = hf_import_check(map, weights, fix);
  std::vector<float> flat(static_cast<size_t>(map.size));
  hf_import_range(map, weights, plan, 0, map.size, flat.data());
  return flat;
}

std::vector<HfPieceRange> hf_pieces(const HfModelMap& map) {
  std::vector<HfPieceRange> out;
  for (const auto& t : map.tensors) {
    const int64_t cols = cols_of(t);
    int64_t row0 = 0;
    for (const auto& p : t.pieces) {
      out.push_back({p.name, hf_piece_shape(t, p), t.offset + row0 * cols, p.rows, cols, t.transposed});
      row0 += p.rows;
    }
  }
  return out;
}

std::vector<std::pair<int64_t, int64_t>> hf_chunks(const HfModelMap& map, int64_t max_values) {
  std::vector<std::pair<int64_t, int64_t>> chunks;
  int64_t open_begin = 0, open_end = 0;  // the chunk being filled
  auto close = [&] {
    if (open_end > open_begin) chunks.emplace_back(open_begin, open_end);
    open_begin = open_end;
  };
  for (const HfPieceRange& p : hf_pieces(map)) {
    const int64_t size = p.rows * p.cols;
    AISCALE_CHECK(p.begin == open_end, "the HF table of {} does not tile the flat buffer at {}",
                  map.architecture, p.name);
    if (open_end - open_begin + size <= max_values) {
      open_end += size;
      continue;
    }
    close();
    if (size <= max_values) {
      open_end += size;
      continue;
    }
    // Larger than a chunk: whole rows at a time (at least one).
    const int64_t rows_per = std::max<int64_t>(1, max_values / p.cols);
    for (int64_t r = 0; r < p.rows; r += rows_per) {
      open_end = p.begin + std::min(p.rows, r + rows_per) * p.cols;
      close();
    }
  }
  close();
  AISCALE_CHECK(open_end == map.size, "the HF table of {} covers {} of {} values",
                map.architecture, open_end, map.size);
  return chunks;
}

std::vector<SafeTensor> hf_export(const HfModelMap& map, const float* flat, const std::string& dtype) {
  std::vector<SafeTensor> out;
  for (const auto& t : map.tensors) {
    const int64_t cols = cols_of(t);
    int64_t row0 = 0;
    for (const auto& p : t.pieces) {
      SafeTensor s;
      s.name = p.name;
      s.dtype = dtype;
      s.shape = hf_piece_shape(t, p);
      const float* src = flat + t.offset + row0 * cols;
      if (t.transposed) {  // ours (rows, cols) -> HF (cols, rows)
        s.data.resize(static_cast<size_t>(p.rows * cols));
        for (int64_t r = 0; r < p.rows; ++r)
          for (int64_t k = 0; k < cols; ++k) s.data[k * p.rows + r] = src[r * cols + k];
      } else {
        s.data.assign(src, src + p.rows * cols);
      }
      row0 += p.rows;
      out.push_back(std::move(s));
    }
  }
  return out;
}

HfModelMap hf_model_map(const nn::GptConfig& c) { return c.llama() ? llama_hf_map(c) : gpt2_hf_map(c); }

HfModelMap gpt2_hf_map(const nn::GptConfig& c) {
  HfModelMap m;
  m.architecture = "GPT2LMHeadModel";
  const nn::GptLayout layout(c);
  m.size = layout.size();
  for (const auto& p : layout.tensors()) {
    HfTensorMap t;
    t.param = p.name;
    t.offset = p.offset;
    for (int i = 0; i < p.shape.ndim; ++i) t.shape.push_back(p.shape[i]);
    t.transposed = p.transposed_in_hf;
    t.pieces = {{p.name, t.shape[0]}};
    m.tensors.push_back(std::move(t));
  }
  m.prefixes = {"transformer."};
  m.tied = {{"lm_head.weight", "wte.weight"}};
  static const std::regex buffers(R"(h\.[0-9]+\.attn\.(bias|masked_bias))");
  m.ignored = [](const std::string& name) { return std::regex_match(name, buffers); };
  return m;
}

HfModelMap llama_hf_map(const nn::GptConfig& c) {
  HfModelMap m;
  m.architecture = "LlamaForCausalLM";
  const nn::GptLayout layout(c);
  m.size = layout.size();
  const auto stacked = [](const std::string& name, const char* fused,
                          std::vector<std::pair<const char*, int64_t>> parts) {
    std::vector<HfPiece> pieces;
    const std::string stem = "model." + name.substr(0, name.size() - std::string(fused).size());
    for (const auto& [part, rows] : parts) pieces.push_back({stem + part, rows});
    return pieces;
  };
  for (const auto& p : layout.tensors()) {
    HfTensorMap t;
    t.param = p.name;
    t.offset = p.offset;
    for (int i = 0; i < p.shape.ndim; ++i) t.shape.push_back(p.shape[i]);
    if (p.name.ends_with("self_attn.qkv_proj.weight"))
      t.pieces = stacked(p.name, "qkv_proj.weight",
                         {{"q_proj.weight", c.n_embd}, {"k_proj.weight", c.kv_rows()}, {"v_proj.weight", c.kv_rows()}});
    else if (p.name.ends_with("mlp.gate_up_proj.weight"))
      t.pieces = stacked(p.name, "gate_up_proj.weight", {{"gate_proj.weight", c.ffn()}, {"up_proj.weight", c.ffn()}});
    else if (p.name == "lm_head.weight")
      t.pieces = {{p.name, t.shape[0]}};
    else
      t.pieces = {{"model." + p.name, t.shape[0]}};
    m.tensors.push_back(std::move(t));
  }
  if (c.tied()) m.tied = {{"lm_head.weight", "model.embed_tokens.weight"}};
  static const std::regex buffers(R"(model\.layers\.[0-9]+\.self_attn\.rotary_emb\.inv_freq)");
  m.ignored = [](const std::string& name) { return std::regex_match(name, buffers); };
  return m;
}

}  // namespace aiscale::train
