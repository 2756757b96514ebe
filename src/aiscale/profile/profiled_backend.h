// The host ops, timed: a backend table (ops/ops.h) whose every entry times the op of an
// inner backend into an OpProfiler, with the op's work (FLOPs) and memory traffic, so the
// op table can say what rate each op achieved.
//
// Why a table of trampolines: the host backends are tables of plain function pointers
// (one per op), which carry no state; the trampolines find their inner backend and
// profiler through a per-thread slot set by profiled_host_backend(). A model swaps its
// table for this one only for the profiled steps and back afterwards, so an unprofiled
// step calls the inner backend directly, as before.
#pragma once
#include "aiscale/ops/ops.h"
#include "aiscale/profile/op_profiler.h"

namespace aiscale::profile {

// `inner` itself when profiler is null; else the timed table for calls from this thread
// (inner and profiler must outlive its use).
ops::Backend profiled_host_backend(const ops::Backend& inner, OpProfiler* profiler);

}  // namespace aiscale::profile
