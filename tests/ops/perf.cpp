// The `perf` mode of test_ops: each op at the shapes of the project's CPU target model
// (GPT L=4 H=4 C=256 T=128 B=8 V=50257, so N = B*T = 1024 rows), one JSON line per op:
// median time, GFLOP/s for the products, GB/s (minimum bytes moved) for the rest.
// Without --op it ends with an estimate of the whole training step from these timings.
// cpu_ms is the process's CPU time per run (all threads, spinning included): on a busy
// machine, a single-thread run's cpu_ms is the better guide to its unloaded time.
#include <omp.h>
#include <time.h>

#include <algorithm>
#include <cstdio>
#include <functional>
#include <memory>

#include <fmt/format.h>

#include "aiscale/core/timer.h"
#include "harness.h"

namespace aiscale::ops::testing {
namespace {

constexpr int64_t kB = 8, kT = 128, kC = 256, kNH = 4, kL = 4, kV = 50257;
constexpr int64_t kN = kB * kT;
// Parameters of the target model: wte, wpe, L blocks, final layernorm.
constexpr int64_t kParams = kV * kC + kT * kC + kL * (12 * kC * kC + 13 * kC) + 2 * kC;

struct PerfItem {
  std::string family;  // for --op
  std::string op;
  std::string shape;  // JSON object text
  double flops = 0.0;
  double bytes = 0.0;
  int per_step = 0;  // calls in one training step of the target model
  std::function<void()> run;
};

Floats random_floats(int64_t n, uint64_t seed, float scale = 1.0f) {
  Floats x(n);
  Rng rng(seed);
  for (float& v : x) v = scale * (2.0f * rng.uniform() - 1.0f);
  return x;
}

void add_matmul(std::vector<PerfItem>& items, const Backend& be, int64_t N, int64_t C, int64_t OC,
                bool bias, int per_step) {
  struct S { Floats inp, weight, bias, out, dout, dinp, dweight, dbias; };
  auto s = std::make_shared<S>();
  s->inp = random_floats(N * C, 1);
  s->weight = random_floats(OC * C, 2, 0.05f);
  s->bias = random_floats(OC, 3);
  s->out = Floats(N * OC);
  s->dout = random_floats(N * OC, 4);
  s->dinp = Floats(N * C);
  s->dweight = Floats(OC * C);
  s->dbias = Floats(OC);
  const std::string shape = fmt::format(R"({{"N":{},"C":{},"OC":{},"bias":{}}})", N, C, OC, bias);
  const double nco = double(N) * C * OC;
  items.push_back({"matmul", "matmul_forward", shape, 2 * nco, 4.0 * (N * C + OC * C + N * OC),
                   per_step, [s, &be, N, C, OC, bias] {
                     be.matmul_forward(s->out.data(), s->inp.data(), s->weight.data(),
                                       bias ? s->bias.data() : nullptr, N, C, OC);
                   }});
  items.push_back({"matmul", "matmul_backward", shape, 4 * nco,
                   4.0 * (2 * N * C + 3 * OC * C + N * OC), per_step, [s, &be, N, C, OC, bias] {
                     be.matmul_backward(s->dinp.data(), s->dweight.data(),
                                        bias ? s->dbias.data() : nullptr, s->dout.data(),
                                        s->inp.data(), s->weight.data(), N, C, OC);
                   }});
}

std::vector<PerfItem> perf_items(const Backend& be) {
  std::vector<PerfItem> items;
  add_matmul(items, be, kN, kC, 3 * kC, true, kL);   // qkv
  add_matmul(items, be, kN, kC, kC, true, kL);       // attention projection
  add_matmul(items, be, kN, kC, 4 * kC, true, kL);   // MLP up
  add_matmul(items, be, kN, 4 * kC, kC, true, kL);   // MLP down
  add_matmul(items, be, kN, kC, kV, false, 1);       // LM head (tied, no bias)

  {
    struct S { Floats qkv, out, att, dout, datt, dqkv; };
    auto s = std::make_shared<S>();
    s->qkv = random_floats(kN * 3 * kC, 5);
    s->out = Floats(kN * kC);
    s->att = Floats(kB * kNH * kT * kT);
    s->dout = random_floats(kN * kC, 6);
    s->datt = Floats(kB * kNH * kT * kT);
    s->dqkv = Floats(kN * 3 * kC);
    be.attention_forward(s->out.data(), s->att.data(), s->qkv.data(), kB, kT, kC, kNH);
    const std::string shape = fmt::format(R"({{"B":{},"T":{},"C":{},"NH":{}}})", kB, kT, kC, kNH);
    // causal: T(T+1)/2 query-key pairs per head, HS multiply-adds each for scores and for att@v
    const double pairs = double(kB) * kNH * kT * (kT + 1) / 2;
    const double fwd_flops = 2.0 * 2.0 * pairs * (kC / kNH);
    items.push_back({"attention", "attention_forward", shape, fwd_flops, 0.0, int(kL), [s, &be] {
                       be.attention_forward(s->out.data(), s->att.data(), s->qkv.data(), kB, kT,
                                            kC, kNH);
                     }});
    items.push_back({"attention", "attention_backward", shape, 2 * fwd_flops, 0.0, int(kL),
                     [s, &be] {
                       be.attention_backward(s->dqkv.data(), s->datt.data(), s->dout.data(),
                                             s->qkv.data(), s->att.data(), kB, kT, kC, kNH);
                     }});
  }
  {
    struct S { Floats inp, weight, bias, out, mean, rstd, dout, dinp, dweight, dbias; };
    auto s = std::make_shared<S>();
    s->inp = random_floats(kN * kC, 7);
    s->weight = random_floats(kC, 8);
    s->bias = random_floats(kC, 9);
    s->out = Floats(kN * kC);
    s->mean = Floats(kN);
    s->rstd = Floats(kN);
    s->dout = random_floats(kN * kC, 10);
    s->dinp = Floats(kN * kC);
    s->dweight = Floats(kC);
    s->dbias = Floats(kC);
    be.layernorm_forward(s->out.data(), s->mean.data(), s->rstd.data(), s->inp.data(),
                         s->weight.data(), s->bias.data(), kN, kC);
    const std::string shape = fmt::format(R"({{"N":{},"C":{}}})", kN, kC);
    items.push_back({"layernorm", "layernorm_forward", shape, 0.0, 4.0 * 2 * kN * kC, 2 * kL + 1,
                     [s, &be] {
                       be.layernorm_forward(s->out.data(), s->mean.data(), s->rstd.data(),
                                            s->inp.data(), s->weight.data(), s->bias.data(), kN,
                                            kC);
                     }});
    items.push_back({"layernorm", "layernorm_backward", shape, 0.0, 4.0 * 4 * kN * kC, 2 * kL + 1,
                     [s, &be] {
                       be.layernorm_backward(s->dinp.data(), s->dweight.data(), s->dbias.data(),
                                             s->dout.data(), s->inp.data(), s->weight.data(),
                                             s->mean.data(), s->rstd.data(), kN, kC);
                     }});
  }
  {
    const int64_t n = kN * 4 * kC;
    struct S { Floats inp, out, dout, dinp; };
    auto s = std::make_shared<S>();
    s->inp = random_floats(n, 11, 3.0f);
    s->out = Floats(n);
    s->dout = random_floats(n, 12);
    s->dinp = Floats(n);
    const std::string shape = fmt::format(R"({{"n":{}}})", n);
    items.push_back({"gelu", "gelu_forward", shape, 0.0, 4.0 * 2 * n, int(kL), [s, &be, n] {
                       be.gelu_forward(s->out.data(), s->inp.data(), n);
                     }});
    items.push_back({"gelu", "gelu_backward", shape, 0.0, 4.0 * 3 * n, int(kL), [s, &be, n] {
                       be.gelu_backward(s->dinp.data(), s->inp.data(), s->dout.data(), n);
                     }});
  }
  {
    const int64_t n = kN * kC;
    struct S { Floats a, b, out, da, db, dout; };
    auto s = std::make_shared<S>();
    s->a = random_floats(n, 13);
    s->b = random_floats(n, 14);
    s->out = Floats(n);
    s->da = Floats(n);
    s->db = Floats(n);
    s->dout = random_floats(n, 15);
    const std::string shape = fmt::format(R"({{"n":{}}})", n);
    items.push_back({"residual", "residual_forward", shape, 0.0, 4.0 * 3 * n, 2 * int(kL),
                     [s, &be, n] {
                       be.residual_forward(s->out.data(), s->a.data(), s->b.data(), n);
                     }});
    items.push_back({"residual", "residual_backward", shape, 0.0, 4.0 * 5 * n, 2 * int(kL),
                     [s, &be, n] {
                       be.residual_backward(s->da.data(), s->db.data(), s->dout.data(), n);
                     }});
  }
  {
    struct S { std::vector<int32_t> tokens; Floats wte, wpe, out, dout, dwte, dwpe; };
    auto s = std::make_shared<S>();
    Rng rng(16);
    s->tokens.resize(kN);
    for (int32_t& t : s->tokens) t = int32_t(rng.below(kV));
    s->wte = random_floats(kV * kC, 17);
    s->wpe = random_floats(kT * kC, 18);
    s->out = Floats(kN * kC);
    s->dout = random_floats(kN * kC, 19);
    s->dwte = Floats(kV * kC);
    s->dwpe = Floats(kT * kC);
    const std::string shape = fmt::format(R"({{"B":{},"T":{},"C":{},"V":{}}})", kB, kT, kC, kV);
    items.push_back({"embedding", "embedding_forward", shape, 0.0, 4.0 * 3 * kN * kC, 1, [s, &be] {
                       be.embedding_forward(s->out.data(), s->tokens.data(), s->wte.data(),
                                            s->wpe.data(), kB, kT, kC);
                     }});
    items.push_back({"embedding", "embedding_backward", shape, 0.0, 4.0 * 5 * kN * kC, 1, [s, &be] {
                       be.embedding_backward(s->dwte.data(), s->dwpe.data(), s->dout.data(),
                                             s->tokens.data(), kB, kT, kC);
                     }});
  }
  {
    struct S { Floats logits, losses, dlosses; std::vector<int32_t> targets; };
    auto s = std::make_shared<S>();
    s->logits = random_floats(kN * kV, 20, 4.0f);
    s->losses = Floats(kN);
    s->dlosses = Floats(kN, 1.0f / kN);
    Rng rng(21);
    s->targets.resize(kN);
    for (int32_t& t : s->targets) t = int32_t(rng.below(kV));
    const std::string shape = fmt::format(R"({{"N":{},"V":{},"in_place":true}})", kN, kV);
    items.push_back({"softmax_xent", "softmax_xent_forward", shape, 0.0, 4.0 * kN * kV, 1,
                     [s, &be] {
                       be.softmax_xent_forward(s->losses.data(), s->logits.data(),
                                               s->targets.data(), kN, kV);
                     }});
    // in place, as training calls it (the buffer then holds gradients, which is fine
    // for timing: the work does not depend on the values)
    items.push_back({"softmax_xent", "softmax_xent_backward", shape, 0.0, 4.0 * 2 * kN * kV, 1,
                     [s, &be] {
                       be.softmax_xent_backward(s->logits.data(), s->logits.data(),
                                                s->targets.data(), s->dlosses.data(), kN, kV);
                     }});
  }
  {
    struct S { Floats params, grads, m, v; };
    auto s = std::make_shared<S>();
    s->params = random_floats(kParams, 22);
    s->grads = random_floats(kParams, 23, 0.01f);
    s->m = Floats(kParams);
    s->v = Floats(kParams);
    const std::string shape = fmt::format(R"({{"n":{}}})", kParams);
    items.push_back({"adamw", "adamw_update", shape, 0.0, 4.0 * 7 * kParams, 1, [s, &be] {
                       AdamWParams hp;
                       hp.weight_decay = 0.1f;
                       be.adamw_update(s->params.data(), s->grads.data(), s->m.data(),
                                       s->v.data(), kParams, hp);
                     }});
    items.push_back({"reductions", "sum_squares", shape, 0.0, 4.0 * kParams, 1, [s] {
                       volatile double sink = sum_squares(s->grads.data(), kParams);
                       (void)sink;
                     }});
  }
  return items;
}

// CPU time of the whole process (all threads), for comparing runs on a shared machine.
double process_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec);
}

}  // namespace

int run_perf_mode(const std::string& op, const std::string& backend_name, double min_seconds) {
  const Backend& be = backend_by_name(backend_name);
  std::vector<PerfItem> items = perf_items(be);
  const int threads = omp_get_max_threads();
  double step_seconds = 0.0;
  int selected = 0;
  for (const PerfItem& item : items) {
    if (!op.empty() && op != item.family && op != item.op) continue;
    ++selected;
    item.run();  // warm-up: first touch of the buffers, OpenBLAS's threads
    std::vector<double> times;
    Timer total;
    const double cpu_start = process_cpu_seconds();
    while (times.size() < 3 || (total.seconds() < min_seconds && times.size() < 1000)) {
      Timer t;
      item.run();
      times.push_back(t.seconds());
    }
    const double cpu_per_rep = (process_cpu_seconds() - cpu_start) / double(times.size());
    std::sort(times.begin(), times.end());
    const double median = times[times.size() / 2];
    std::string rates;
    if (item.flops > 0) rates += fmt::format(R"(,"gflops":{:.2f})", item.flops / median * 1e-9);
    if (item.bytes > 0) rates += fmt::format(R"(,"gbps":{:.2f})", item.bytes / median * 1e-9);
    fmt::print(R"({{"op":"{}","backend":"{}","shape":{},"threads":{},"reps":{},)", item.op,
               be.name, item.shape, threads, times.size());
    fmt::print(R"("ms":{:.4f},"min_ms":{:.4f},"cpu_ms":{:.4f}{},"per_step":{}}})"
               "\n",
               median * 1e3, times.front() * 1e3, cpu_per_rep * 1e3, rates, item.per_step);
    std::fflush(stdout);
    step_seconds += item.per_step * median;
  }
  if (selected == 0) {
    std::printf("no op named '%s'\n", op.c_str());
    return 2;
  }
  if (op.empty()) {
    // Sum of the isolated timings times their calls per step: a floor for the real step
    // (it leaves out everything but the ops, and thread hand-offs between them).
    fmt::print(R"({{"op":"gpt_step_estimate","backend":"{}","model":{{"L":{},"H":{},"C":{},)",
               be.name, kL, kNH, kC);
    fmt::print(R"("T":{},"B":{},"V":{},"params":{}}},"threads":{},)", kT, kB, kV, kParams,
               threads);
    fmt::print(R"("ms":{:.2f},"tokens_per_s":{:.1f}}})"
               "\n",
               step_seconds * 1e3, kN / step_seconds);
  }
  return 0;
}

}  // namespace aiscale::ops::testing
