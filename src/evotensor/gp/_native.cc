// Native CPU evaluator of GP forests, called from jitted JAX code through XLA's typed FFI.
//
// Why: on CPU the plain-JAX evaluator (evaluate.py) runs a select-all program, one XLA kernel
// sequence per node step of a block of trees, so per node-row it pays the XLA runtime's per-kernel
// overhead and computes functions a node does not need. Here each tree is interpreted once per row
// chunk: nodes in reverse prefix order, each node one tight loop over the chunk's rows, so only the
// node's own function runs. Semantics are those of functions.py / reference.py (raw math by
// default, gplearn-style protected variants opt-in, Modi multi-output), and the fused fitness
// returns per-tree sums that evaluate.py finalizes exactly as for the JAX path.
//
// Layout of the inputs (all row-major, float32 / int32):
//   opcode, value, size, output  [pop, max_len]   the forest (prefix order; size[t, 0] is the length)
//   xt                           [n_vars, n_points] the data, transposed (a variable is a row)
//   yt                           [n_y, n_points]    targets (regression) or class labels (n_y = 1)
//   table                        [n_opcodes]        builtin function id of each opcode (-1: none)
// Outputs: forward  pred [pop, n_points, n_outputs];  fitness  term_sum [pop], bad_sum [pop];
//          moments (linear scaling)  [pop, n_outputs, 3] = (mean, M2, co-moment with centered y), bad_sum;
//          normal equations (constant optimization, single output; inputs also slots [pop, K] int32)
//          mean [pop, K+2], cov [pop, K+2, K+2], sse [pop, 2], bad [pop] (see normal_equations_impl).
//
// Every tree is independent and evaluated in a fixed order, so results do not depend on threading.

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <new>
#include <stdexcept>
#include <string>
#include <vector>

#include "xla/ffi/api/ffi.h"

namespace ffi = xla::ffi;

namespace {

// Builtin function ids. The order is part of the interface: _native.function_names() returns it and
// evotensor/gp/native.py builds the opcode table from it.
enum Fn : int32_t {
  kAdd, kSub, kMul, kDiv, kPow, kMax, kMin, kLt, kGt,
  kSin, kCos, kTan, kSinh, kCosh, kTanh, kExp, kLog, kSqrt, kAbs, kNeg, kInv,
  kIfThenElse, kNumFns
};
const char* const kFnNames[kNumFns] = {
    "add", "sub", "mul", "div", "pow", "max", "min", "lt", "gt",
    "sin", "cos", "tan", "sinh", "cosh", "tanh", "exp", "log", "sqrt", "abs", "neg", "inv",
    "if_then_else"};
const int kFnArity[kNumFns] = {2, 2, 2, 2, 2, 2, 2, 2, 2, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 3};

constexpr int32_t kPad = 0, kConst = 1, kVar = 2;
#ifndef EVOTENSOR_GP_ROWS
#define EVOTENSOR_GP_ROWS 256
#endif
constexpr int kRows = EVOTENSOR_GP_ROWS;  // rows per chunk: a node's values are 1 KiB, the live ones stay in L1
constexpr int kTreesPerTask = 8;
constexpr float kEps = 0.001f;      // gplearn's protection threshold (functions.py _EPS)
constexpr float kExpClip = 80.0f;   // functions.py _EXP_CLIP

// Metric ids: the index in evaluate.METRICS.
enum Metric : int32_t { kMse, kRmse, kR2, kAccuracy, kCrossEntropy };

// ---- sin / cos / tan ------------------------------------------------------------------------------
// glibc's sinf/cosf are scalar calls; this form vectorizes. Quadrant reduction in double:
// x = q * pi/2 + r with pi/2 split into two 30-bit parts (q * part is exact for |q| < 2^23) and a
// double remainder, then Taylor polynomials of sin and cos on |r| <= pi/4 (truncation < 1e-14),
// rounded once to float32. |x| >= kTrigLimit, inf and nan take the exact double library path.
constexpr double kTwoOverPi = 0x1.45f306dc9c883p-1;
constexpr double kPio2A = 0x1.921fb548p+0;
constexpr double kPio2B = -0x1.de973dc8p-31;
constexpr double kPio2C = -0x1.9d9cceba3f91fp-62;
constexpr double kRoundMagic = 0x1.8p52;  // (y + M) - M rounds y to the nearest integer
constexpr float kTrigLimit = 1048576.0f;  // 2^20

// The hot loops are compiled for AVX-512, AVX2 and baseline x86-64 and picked at load time (GCC's
// function multi-versioning), so one build runs everywhere and uses the widest vectors it finds.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && defined(__linux__)
#define CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define CLONES
#endif

// The loops below stay in double arithmetic with one select per condition (no integer conversion,
// no branches, no boolean combinations), which is what GCC's vectorizer needs (with
// -fno-trapping-math). The quadrant q mod 4 is read from m = q/4 - round(q/4): 0 -> 0, 1 -> 0.25,
// 2 -> +-0.5, 3 -> -0.25; then sin(x) = s, c, -s, -c and cos(x) = c, -s, -c, s.
inline double round_near(double y) { return (y + kRoundMagic) - kRoundMagic; }

// sin and cos of x (|x| < kTrigLimit; anything else is treated as 0 and fixed by the caller).
inline void sin_cos(float x, double& sin_x, double& cos_x) {
  const double xd = std::fabs(x) < kTrigLimit ? static_cast<double>(x) : 0.0;
  const double q = round_near(xd * kTwoOverPi);
  const double r = ((xd - q * kPio2A) - q * kPio2B) - q * kPio2C;
  const double r2 = r * r;
  const double s = r + r * r2 *
      (-1.0 / 6 + r2 * (1.0 / 120 + r2 * (-1.0 / 5040 + r2 * (1.0 / 362880 +
      r2 * (-1.0 / 39916800 + r2 * (1.0 / 6227020800.0))))));
  const double c = 1.0 + r2 * (-0.5 + r2 * (1.0 / 24 + r2 * (-1.0 / 720 + r2 * (1.0 / 40320 +
      r2 * (-1.0 / 3628800 + r2 * (1.0 / 479001600.0 + r2 * (-1.0 / 87178291200.0)))))));
  const double m = q * 0.25 - round_near(q * 0.25);
  const double am = std::fabs(m);
  double u = am == 0.25 ? c : s;  // odd quadrant: swap
  double v = am == 0.25 ? s : c;
  u = am == 0.5 ? -u : u;  // quadrant 2: both negative
  v = am == 0.5 ? -v : v;
  u = m == -0.25 ? -u : u;  // quadrant 3: sin negative
  v = m == 0.25 ? -v : v;   // quadrant 1: cos negative
  sin_x = u;
  cos_x = v;
}

// The float path, for chunks whose arguments are all below kTrigLimitF (most chunks): twice the
// vector lanes of the double path and one polynomial per function. sin(x) = (-1)^k sin(r) with
// x = k pi + r, cos(x) = (-1)^k sin(r) with x + pi/2 = k pi + r (r = x - (k - 1/2) pi, computed
// from the half-integer k - 1/2 directly). pi is split into 11-, 11-, 11- and 24-bit parts, so
// (k or k - 1/2) * part is exact for the first three (|k| < 2^12), and when r is small (near a
// zero of sin or cos, where relative accuracy matters) every subtraction is exact too; only the
// last product rounds, ~2^-45 absolute. The Taylor polynomial of sin to r^13 on |r| <= pi/2
// truncates at < 7e-10.
constexpr float kTrigLimitF = 8192.0f;
constexpr float kOneOverPiF = 0x1.45f306p-2f;
constexpr float kPiAF = 0x1.92p+1f;
constexpr float kPiBF = 0x1.fb4p-11f;
constexpr float kPiCF = 0x1.444p-23f;
constexpr float kPiDF = 0x1.68c234p-38f;
constexpr float kRoundMagicF = 0x1.8p23f;

inline float round_near_f(float y) { return (y + kRoundMagicF) - kRoundMagicF; }

// (-1)^k sin(x - m pi) for the multiple m of pi nearest to x (m = k) or to x + pi/2 (m = k - 1/2).
inline float sin_shifted(float x, float m, float k) {
  const float r = (((x - m * kPiAF) - m * kPiBF) - m * kPiCF) - m * kPiDF;
  const float r2 = r * r;
  const float s = r + r * r2 * (-1.0f / 6 + r2 * (1.0f / 120 + r2 * (-1.0f / 5040 + r2 * (1.0f / 362880 +
                  r2 * (-1.0f / 39916800 + r2 * (1.0f / 6227020800.0f))))));
  const float odd = std::fabs(k * 0.5f - round_near_f(k * 0.5f));  // 0.5 for odd k, else 0
  return odd == 0.5f ? -s : s;
}
inline float sin_f(float x) {
  const float k = round_near_f(x * kOneOverPiF);
  return sin_shifted(x, k, k);
}
inline float cos_f(float x) {
  const float k = round_near_f(x * kOneOverPiF + 0.5f);
  return sin_shifted(x, k - 0.5f, k);
}

// The range checks are counts, not max-reductions: GCC vectorizes an integer sum but not a float
// max without -ffast-math, and a scalar max chain cost more than the polynomials.
CLONES void trig(int fn, const float* __restrict a, float* __restrict o, int n) {
  int beyond_float = 0;  // |x| >= kTrigLimitF, inf or nan
  for (int r = 0; r < n; ++r) beyond_float += !(std::fabs(a[r]) < kTrigLimitF);
  if (beyond_float == 0) {
    if (fn == kSin) {
      for (int r = 0; r < n; ++r) o[r] = sin_f(a[r]);
    } else if (fn == kCos) {
      for (int r = 0; r < n; ++r) o[r] = cos_f(a[r]);
    } else {
      for (int r = 0; r < n; ++r) o[r] = static_cast<float>(static_cast<double>(sin_f(a[r])) / cos_f(a[r]));
    }
    return;
  }
  if (fn == kSin) {
    for (int r = 0; r < n; ++r) {
      double s, c;
      sin_cos(a[r], s, c);
      o[r] = static_cast<float>(s);
    }
  } else if (fn == kCos) {
    for (int r = 0; r < n; ++r) {
      double s, c;
      sin_cos(a[r], s, c);
      o[r] = static_cast<float>(c);
    }
  } else {
    for (int r = 0; r < n; ++r) {
      double s, c;
      sin_cos(a[r], s, c);
      o[r] = static_cast<float>(s / c);
    }
  }
  int beyond_double = 0;  // |x| >= kTrigLimit, inf or nan: the library functions
  for (int r = 0; r < n; ++r) beyond_double += !(std::fabs(a[r]) < kTrigLimit);
  if (beyond_double == 0) return;
  for (int r = 0; r < n; ++r) {
    if (std::fabs(a[r]) < kTrigLimit) continue;
    const double x = a[r];
    o[r] = static_cast<float>(fn == kSin ? std::sin(x) : fn == kCos ? std::cos(x) : std::tan(x));
  }
}

// ---- one node over a chunk of rows ---------------------------------------------------------------

inline float nan_max(float a, float b) { return (a != a || b != b) ? NAN : (a > b ? a : b); }
inline float nan_min(float a, float b) { return (a != a || b != b) ? NAN : (a < b ? a : b); }

template <class F>
inline void map1(float* __restrict o, const float* __restrict a, int n, F f) {
  for (int r = 0; r < n; ++r) o[r] = f(a[r]);
}
template <class F>
inline void map2(float* __restrict o, const float* __restrict a, const float* __restrict b, int n, F f) {
  for (int r = 0; r < n; ++r) o[r] = f(a[r], b[r]);
}

// o = fn(a, b, c) elementwise over n rows. a, b, c are the node's children, first to last.
CLONES void apply(int fn, bool prot, float* __restrict o, const float* a, const float* b, const float* c, int n) {
  switch (fn) {
    case kAdd: map2(o, a, b, n, [](float x, float y) { return x + y; }); break;
    case kSub: map2(o, a, b, n, [](float x, float y) { return x - y; }); break;
    case kMul: map2(o, a, b, n, [](float x, float y) { return x * y; }); break;
    case kDiv:
      if (prot) map2(o, a, b, n, [](float x, float y) { return std::fabs(y) > kEps ? x / y : 1.0f; });
      else map2(o, a, b, n, [](float x, float y) { return x / y; });
      break;
    case kPow:
      if (prot)
        map2(o, a, b, n, [](float x, float y) {
          return (std::fabs(x) <= kEps && y < 0.0f) ? 1.0f : std::pow(std::fabs(x), y);
        });
      else map2(o, a, b, n, [](float x, float y) { return std::pow(x, y); });
      break;
    case kMax: map2(o, a, b, n, nan_max); break;
    case kMin: map2(o, a, b, n, nan_min); break;
    case kLt: map2(o, a, b, n, [](float x, float y) { return x < y ? 1.0f : 0.0f; }); break;
    case kGt: map2(o, a, b, n, [](float x, float y) { return x > y ? 1.0f : 0.0f; }); break;
    case kSin: case kCos: case kTan: trig(fn, a, o, n); break;
    case kSinh: map1(o, a, n, [](float x) { return std::sinh(x); }); break;
    case kCosh: map1(o, a, n, [](float x) { return std::cosh(x); }); break;
    case kTanh: map1(o, a, n, [](float x) { return std::tanh(x); }); break;
    case kExp:
      if (prot) map1(o, a, n, [](float x) { return std::exp(x > kExpClip ? kExpClip : x); });  // nan stays nan
      else map1(o, a, n, [](float x) { return std::exp(x); });
      break;
    case kLog:
      if (prot) map1(o, a, n, [](float x) { return std::fabs(x) > kEps ? std::log(std::fabs(x)) : 0.0f; });
      else map1(o, a, n, [](float x) { return std::log(x); });
      break;
    case kSqrt:
      if (prot) map1(o, a, n, [](float x) { return std::sqrt(std::fabs(x)); });
      else map1(o, a, n, [](float x) { return std::sqrt(x); });
      break;
    case kAbs: map1(o, a, n, [](float x) { return std::fabs(x); }); break;
    case kNeg: map1(o, a, n, [](float x) { return -x; }); break;
    case kInv:
      if (prot) map1(o, a, n, [](float x) { return std::fabs(x) > kEps ? 1.0f / x : 0.0f; });
      else map1(o, a, n, [](float x) { return 1.0f / x; });
      break;
    case kIfThenElse:
      for (int r = 0; r < n; ++r) o[r] = a[r] > 0.0f ? b[r] : c[r];
      break;
  }
}

// ---- one tree over a chunk of rows ---------------------------------------------------------------

struct Forest {
  const int32_t* opcode;
  const float* value;
  const int32_t* size;
  const int32_t* output;
  int64_t pop, max_len;
  const float* xt;
  int64_t n_vars, n_points;
  const int32_t* table;
  int64_t n_opcodes;
  int n_outputs;
  bool prot;
};

// Per-thread working memory: one row chunk per node position (a node writes only its own slot, so a
// child's values stay valid for its parent and for Modi pass-through), the stack of value pointers,
// and the outputs of a multi-output tree.
// fit() throws std::bad_alloc when the memory is not there; it then releases what it holds (a
// failed call must not leave a thread holding a huge half-grown buffer) and rethrows, and the
// handler turns the exception into an error (see parallel_trees).
struct Scratch {
  std::vector<float> slots, outs;
  std::vector<const float*> stack;
  void fit(const Forest& f) {
    try {
      slots.resize(static_cast<size_t>(f.max_len) * kRows);
      stack.resize(static_cast<size_t>(f.max_len) + 1);
      outs.resize(static_cast<size_t>(f.n_outputs) * kRows);
    } catch (...) {
      std::vector<float>().swap(slots);
      std::vector<float>().swap(outs);
      std::vector<const float*>().swap(stack);
      throw;
    }
  }
};

// Evaluates tree t on rows [r0, r0 + n). Chunks of one tree must come in order, starting at r0 = 0,
// with nothing else run on `s` in between: a constant's slot is filled in the first chunk only (it
// belongs to that node alone, and the first chunk is the longest). Sets result to its n_outputs
// output rows (n floats each; for one output, the root's values) and returns true, or returns false
// for a malformed tree (the caller reports nan): the JAX path's results on such trees are
// unspecified, and Forest.check rejects them.
bool eval_tree(const Forest& f, int64_t t, int64_t r0, int n, Scratch& s, const float** result) {
  const int32_t* op = f.opcode + t * f.max_len;
  const float* val = f.value + t * f.max_len;
  const int32_t* out = f.output + t * f.max_len;
  const int64_t len = f.size[t * f.max_len];
  if (len < 1 || len > f.max_len) return false;
  const bool modi = f.n_outputs > 1;
  if (modi) std::fill(s.outs.begin(), s.outs.begin() + static_cast<size_t>(f.n_outputs) * kRows, 0.0f);
  const float** stack = s.stack.data();
  int64_t sp = 0;
  for (int64_t i = len - 1; i >= 0; --i) {
    const int32_t code = op[i];
    float* slot = s.slots.data() + i * kRows;
    const float* node;    // this node's value
    const float* passed;  // what it hands to its parent (Modi: its rightmost child's value)
    if (code == kConst) {
      if (r0 == 0) std::fill(slot, slot + n, val[i]);
      node = passed = slot;
    } else if (code == kVar) {
      // clamped as on the JAX path (a nan index reads variable 0 instead of being undefined)
      const float fv = val[i];
      const int64_t v = fv >= 1.0f ? std::min<int64_t>(static_cast<int64_t>(std::min(fv, 1e9f)), f.n_vars - 1) : 0;
      node = passed = f.xt + v * f.n_points + r0;
    } else {
      if (code < 0 || code >= f.n_opcodes) return false;
      const int32_t fn = f.table[code];
      if (fn < 0 || fn >= kNumFns) return false;
      const int arity = kFnArity[fn];
      if (sp < arity) return false;
      const float* a = stack[sp - 1];
      const float* b = arity >= 2 ? stack[sp - 2] : a;
      const float* c = arity >= 3 ? stack[sp - 3] : a;
      apply(fn, f.prot, slot, a, b, c, n);
      sp -= arity;
      node = slot;
      passed = stack[sp];  // the rightmost child: pushed first, so deepest of the popped
      if (!modi || out[i] < 0) passed = node;
    }
    if (modi && out[i] >= 0 && out[i] < f.n_outputs) {
      float* o = s.outs.data() + static_cast<int64_t>(out[i]) * kRows;
      for (int r = 0; r < n; ++r) o[r] += node[r];
    }
    stack[sp++] = passed;
  }
  if (sp != 1) return false;
  if (modi) {
    for (int k = 0; k < f.n_outputs; ++k) result[k] = s.outs.data() + static_cast<int64_t>(k) * kRows;
  } else {
    result[0] = stack[0];
  }
  return true;
}

// ---- running trees on XLA's intra-op thread pool ---------------------------------------------------

// Calls body(t0, t1) on disjoint ranges of [0, pop), on the calling thread and on up to
// num_threads pool workers, and returns when every range is done. The caller waits only for ranges
// some thread has claimed (a worker that starts late finds nothing left and touches only `shared`),
// so a busy pool cannot deadlock it.
//
// An exception thrown by body (std::bad_alloc when a thread's working memory is not there) must not
// leave its thread: on a pool worker it would call std::terminate and abort the process. It is
// caught on every thread, the ranges not yet started are skipped, and the first error comes back
// as an ffi::Error (RESOURCE_EXHAUSTED for memory), which JAX raises as a Python exception.
template <class Body>
ffi::Error parallel_trees(ffi::ThreadPool& pool, int64_t pop, const Body& body) {
  const int64_t n_tasks = (pop + kTreesPerTask - 1) / kTreesPerTask;
  if (n_tasks == 0) return ffi::Error::Success();
  struct Shared {
    std::atomic<int64_t> next{0};
    std::atomic<int64_t> done{0};
    std::atomic<bool> failed{false};
    std::mutex m;
    std::condition_variable cv;
    ffi::ErrorCode code = ffi::ErrorCode::kOk;  // the first failure, under m
    std::string message;
  };
  auto shared = std::make_shared<Shared>();
  const Body* body_ptr = &body;
  auto drain = [shared, pop, n_tasks, body_ptr]() noexcept {
    for (int64_t k = shared->next.fetch_add(1); k < n_tasks; k = shared->next.fetch_add(1)) {
      if (!shared->failed.load()) {
        ffi::ErrorCode code = ffi::ErrorCode::kOk;
        const char* what = nullptr;
        try {
          (*body_ptr)(k * kTreesPerTask, std::min(pop, (k + 1) * kTreesPerTask));
        } catch (const std::bad_alloc&) {
          code = ffi::ErrorCode::kResourceExhausted;
          what = "out of memory for the working buffers of a thread (they grow with max_len and n_outputs)";
        } catch (const std::exception& e) {
          code = ffi::ErrorCode::kInternal;
          what = e.what();
        } catch (...) {
          code = ffi::ErrorCode::kInternal;
          what = "unknown C++ exception";
        }
        if (code != ffi::ErrorCode::kOk) {
          std::lock_guard<std::mutex> lock(shared->m);
          if (!shared->failed.exchange(true)) {
            shared->code = code;
            try {
              shared->message = what;
            } catch (...) {
            }
          }
        }
      }
      if (shared->done.fetch_add(1) + 1 == n_tasks) {
        std::lock_guard<std::mutex> lock(shared->m);
        shared->cv.notify_all();
      }
    }
  };
  const int64_t workers = std::min<int64_t>(std::max<int64_t>(pool.num_threads(), 0), n_tasks - 1);
  for (int64_t w = 0; w < workers; ++w) pool.Schedule([drain]() { drain(); });
  drain();
  std::unique_lock<std::mutex> lock(shared->m);
  shared->cv.wait(lock, [&] { return shared->done.load() == n_tasks; });
  if (!shared->failed.load()) return ffi::Error::Success();
  return ffi::Error(shared->code, "evotensor GP native evaluator: " + shared->message);
}

// ---- argument checks ---------------------------------------------------------------------------------

ffi::Error check_forest(const Forest& f, ffi::AnyBuffer::Dimensions d_op, ffi::AnyBuffer::Dimensions d_val,
                        ffi::AnyBuffer::Dimensions d_size, ffi::AnyBuffer::Dimensions d_out,
                        ffi::AnyBuffer::Dimensions d_x) {
  if (d_op.size() != 2 || d_op[1] < 1) return ffi::Error::InvalidArgument("opcode must be [pop, max_len >= 1]");
  for (auto d : {d_val, d_size, d_out}) {
    if (d.size() != 2 || d[0] != d_op[0] || d[1] != d_op[1])
      return ffi::Error::InvalidArgument("value, size, output must have opcode's shape [pop, max_len]");
  }
  if (d_x.size() != 2 || d_x[0] < 1 || d_x[1] < 1)
    return ffi::Error::InvalidArgument("xt must be [n_vars >= 1, n_points >= 1]");
  if (f.n_outputs < 1) return ffi::Error::InvalidArgument("n_outputs must be >= 1");
  return ffi::Error::Success();
}

Forest make_forest(ffi::Buffer<ffi::S32> opcode, ffi::Buffer<ffi::F32> value, ffi::Buffer<ffi::S32> size,
                   ffi::Buffer<ffi::S32> output, ffi::Buffer<ffi::F32> xt, ffi::Buffer<ffi::S32> table,
                   int32_t n_outputs, int32_t prot) {
  Forest f;
  f.opcode = opcode.typed_data();
  f.value = value.typed_data();
  f.size = size.typed_data();
  f.output = output.typed_data();
  auto d = opcode.dimensions();
  f.pop = d.size() == 2 ? d[0] : 0;
  f.max_len = d.size() == 2 ? d[1] : 0;
  auto dx = xt.dimensions();
  f.xt = xt.typed_data();
  f.n_vars = dx.size() == 2 ? dx[0] : 0;
  f.n_points = dx.size() == 2 ? dx[1] : 0;
  f.table = table.typed_data();
  f.n_opcodes = static_cast<int64_t>(table.element_count());
  f.n_outputs = n_outputs;
  f.prot = prot != 0;
  return f;
}

// ---- forward -----------------------------------------------------------------------------------------

ffi::Error forward_impl(ffi::ThreadPool pool, ffi::Buffer<ffi::S32> opcode, ffi::Buffer<ffi::F32> value,
                        ffi::Buffer<ffi::S32> size, ffi::Buffer<ffi::S32> output, ffi::Buffer<ffi::F32> xt,
                        ffi::Buffer<ffi::S32> table, int32_t n_outputs, int32_t prot,
                        ffi::ResultBuffer<ffi::F32> pred) {
  const Forest f = make_forest(opcode, value, size, output, xt, table, n_outputs, prot);
  if (auto e = check_forest(f, opcode.dimensions(), value.dimensions(), size.dimensions(),
                            output.dimensions(), xt.dimensions());
      !e.success())
    return e;
  auto dp = pred->dimensions();
  if (dp.size() != 3 || dp[0] != f.pop || dp[1] != f.n_points || dp[2] != f.n_outputs)
    return ffi::Error::InvalidArgument("pred must be [pop, n_points, n_outputs]");
  float* p = pred->typed_data();
  return parallel_trees(pool, f.pop, [&](int64_t t0, int64_t t1) {
    thread_local Scratch s;
    s.fit(f);
    std::vector<const float*> res(f.n_outputs);
    for (int64_t t = t0; t < t1; ++t) {
      float* pt = p + t * f.n_points * f.n_outputs;
      for (int64_t r0 = 0; r0 < f.n_points; r0 += kRows) {
        const int n = static_cast<int>(std::min<int64_t>(kRows, f.n_points - r0));
        const bool ok = eval_tree(f, t, r0, n, s, res.data());
        for (int k = 0; k < f.n_outputs; ++k)
          for (int r = 0; r < n; ++r) pt[(r0 + r) * f.n_outputs + k] = ok ? res[k][r] : NAN;
      }
    }
  });
}

// ---- fused fitness ----------------------------------------------------------------------------------

// Adds the metric's per-row terms of rows [r0, r0 + n) to term (double) and counts rows with a
// non-finite prediction in bad; evaluate.row_terms defines the terms.
CLONES void add_row_terms(int metric, int n_outputs, const float* const* pred, const float* yt, int64_t n_points,
                   int64_t r0, int n, double& term, int64_t& bad) {
  for (int r = 0; r < n; ++r) {
    bool finite = true;
    for (int k = 0; k < n_outputs; ++k) finite &= std::isfinite(pred[k][r]);
    bad += !finite;
  }
  if (metric == kMse || metric == kRmse || metric == kR2) {
    // Eight independent partial sums, added in a fixed order: one running sum would be a chain of
    // dependent double adds (GCC keeps it scalar without -ffast-math), which cost about as much
    // as evaluating a small tree.
    constexpr int kLanes = 8;
    for (int k = 0; k < n_outputs; ++k) {
      const float* y = yt + k * n_points + r0;
      const float* p = pred[k];
      double lane[kLanes] = {};
      int r = 0;
      for (; r + kLanes <= n; r += kLanes) {
        for (int j = 0; j < kLanes; ++j) {
          const double d = static_cast<double>(p[r + j]) - y[r + j];
          lane[j] += d * d;
        }
      }
      for (; r < n; ++r) {
        const double d = static_cast<double>(p[r]) - y[r];
        lane[0] += d * d;
      }
      for (int j = 0; j < kLanes; ++j) term += lane[j];
    }
  } else if (metric == kAccuracy) {
    const float* label = yt + r0;
    for (int r = 0; r < n; ++r) {
      bool correct;
      if (n_outputs == 1) {
        correct = (pred[0][r] > 0.0f) == (label[r] > 0.5f);
      } else {
        int best = 0;  // first maximum, as jnp.argmax
        for (int k = 1; k < n_outputs; ++k)
          if (pred[k][r] > pred[best][r]) best = k;
        correct = static_cast<float>(best) == label[r];
      }
      term += correct;
    }
  } else {  // cross entropy
    const float* label = yt + r0;
    for (int r = 0; r < n; ++r) {
      if (n_outputs == 1) {
        const double z = pred[0][r];
        term += std::max(z, 0.0) - z * label[r] + std::log1p(std::exp(-std::fabs(z)));
      } else {
        double m = pred[0][r];
        for (int k = 1; k < n_outputs; ++k) m = std::max<double>(m, pred[k][r]);
        double sum = 0.0, picked = 0.0;
        for (int k = 0; k < n_outputs; ++k) {
          sum += std::exp(pred[k][r] - m);
          if (static_cast<float>(k) == label[r]) picked = pred[k][r];
        }
        term += m + std::log(sum) - picked;
      }
    }
  }
}

ffi::Error fitness_impl(ffi::ThreadPool pool, ffi::Buffer<ffi::S32> opcode, ffi::Buffer<ffi::F32> value,
                        ffi::Buffer<ffi::S32> size, ffi::Buffer<ffi::S32> output, ffi::Buffer<ffi::F32> xt,
                        ffi::Buffer<ffi::F32> yt, ffi::Buffer<ffi::S32> table, int32_t n_outputs,
                        int32_t metric, int32_t prot, ffi::ResultBuffer<ffi::F32> term_sum,
                        ffi::ResultBuffer<ffi::F32> bad_sum) {
  const Forest f = make_forest(opcode, value, size, output, xt, table, n_outputs, prot);
  if (auto e = check_forest(f, opcode.dimensions(), value.dimensions(), size.dimensions(),
                            output.dimensions(), xt.dimensions());
      !e.success())
    return e;
  if (metric < kMse || metric > kCrossEntropy) return ffi::Error::InvalidArgument("unknown metric id");
  auto dy = yt.dimensions();
  const int64_t n_y = (metric == kAccuracy || metric == kCrossEntropy) ? 1 : n_outputs;
  if (dy.size() != 2 || dy[0] != n_y || dy[1] != f.n_points)
    return ffi::Error::InvalidArgument("yt must be [n_y, n_points]");
  if (term_sum->element_count() != static_cast<size_t>(f.pop) ||
      bad_sum->element_count() != static_cast<size_t>(f.pop))
    return ffi::Error::InvalidArgument("term_sum and bad_sum must be [pop]");
  float* term_out = term_sum->typed_data();
  float* bad_out = bad_sum->typed_data();
  const float* y = yt.typed_data();
  return parallel_trees(pool, f.pop, [&](int64_t t0, int64_t t1) {
    thread_local Scratch s;
    s.fit(f);
    std::vector<const float*> res(f.n_outputs);
    for (int64_t t = t0; t < t1; ++t) {
      double term = 0.0;
      int64_t bad = 0;
      bool ok = true;
      for (int64_t r0 = 0; r0 < f.n_points && ok; r0 += kRows) {
        const int n = static_cast<int>(std::min<int64_t>(kRows, f.n_points - r0));
        ok = eval_tree(f, t, r0, n, s, res.data());
        if (ok) add_row_terms(metric, f.n_outputs, res.data(), y, f.n_points, r0, n, term, bad);
      }
      term_out[t] = ok ? static_cast<float>(term) : NAN;
      bad_out[t] = ok ? static_cast<float>(bad) : 1.0f;
    }
  });
}

// ---- moments for linear scaling ---------------------------------------------------------------------

// Per output k, the moments of the predictions p that closed-form linear scaling needs: the mean of p,
// M2 = sum (p - mean)^2 and C = sum p * yc with yc the CENTERED targets (so C is the co-moment: it
// needs no shift). Each 256-row chunk's mean and M2 are merged into the running ones with Chan et
// al.'s pairwise update, in double: a plain sum of p^2 would cancel catastrophically for a tree with
// a large offset and a small spread.
ffi::Error moments_impl(ffi::ThreadPool pool, ffi::Buffer<ffi::S32> opcode, ffi::Buffer<ffi::F32> value,
                        ffi::Buffer<ffi::S32> size, ffi::Buffer<ffi::S32> output, ffi::Buffer<ffi::F32> xt,
                        ffi::Buffer<ffi::F32> yct, ffi::Buffer<ffi::S32> table, int32_t n_outputs, int32_t prot,
                        ffi::ResultBuffer<ffi::F32> moments, ffi::ResultBuffer<ffi::F32> bad_sum) {
  const Forest f = make_forest(opcode, value, size, output, xt, table, n_outputs, prot);
  if (auto e = check_forest(f, opcode.dimensions(), value.dimensions(), size.dimensions(),
                            output.dimensions(), xt.dimensions());
      !e.success())
    return e;
  auto dy = yct.dimensions();
  if (dy.size() != 2 || dy[0] != n_outputs || dy[1] != f.n_points)
    return ffi::Error::InvalidArgument("yct must be [n_outputs, n_points]");
  if (moments->element_count() != static_cast<size_t>(f.pop * n_outputs * 3) ||
      bad_sum->element_count() != static_cast<size_t>(f.pop))
    return ffi::Error::InvalidArgument("moments must be [pop, n_outputs, 3] and bad_sum [pop]");
  float* mom_out = moments->typed_data();
  float* bad_out = bad_sum->typed_data();
  const float* yc = yct.typed_data();
  // float32 centering leaves sum(yc) != 0: C = sum p*yc - mean(p) * sum(yc) removes it (it matters
  // for a tree with a large offset, whose sum p*yc would otherwise carry mean(p) * residue)
  std::vector<double> yc_sum(f.n_outputs, 0.0);
  for (int k = 0; k < f.n_outputs; ++k)
    for (int64_t r = 0; r < f.n_points; ++r) yc_sum[k] += yc[k * f.n_points + r];
  return parallel_trees(pool, f.pop, [&](int64_t t0, int64_t t1) {
    thread_local Scratch s;
    s.fit(f);
    std::vector<const float*> res(f.n_outputs);
    std::vector<double> mean(f.n_outputs), m2(f.n_outputs), co(f.n_outputs);
    for (int64_t t = t0; t < t1; ++t) {
      std::fill(mean.begin(), mean.end(), 0.0);
      std::fill(m2.begin(), m2.end(), 0.0);
      std::fill(co.begin(), co.end(), 0.0);
      int64_t bad = 0, seen = 0;
      bool ok = true;
      for (int64_t r0 = 0; r0 < f.n_points && ok; r0 += kRows) {
        const int n = static_cast<int>(std::min<int64_t>(kRows, f.n_points - r0));
        ok = eval_tree(f, t, r0, n, s, res.data());
        if (!ok) break;
        for (int r = 0; r < n; ++r) {
          bool finite = true;
          for (int k = 0; k < f.n_outputs; ++k) finite &= std::isfinite(res[k][r]);
          bad += !finite;
        }
        for (int k = 0; k < f.n_outputs; ++k) {
          const float* p = res[k];
          const float* y = yc + k * f.n_points + r0;
          double sum = 0.0, cross = 0.0;
          for (int r = 0; r < n; ++r) {
            sum += p[r];
            cross += static_cast<double>(p[r]) * y[r];
          }
          const double chunk_mean = sum / n;
          double chunk_m2 = 0.0;
          for (int r = 0; r < n; ++r) {
            const double d = p[r] - chunk_mean;
            chunk_m2 += d * d;
          }
          const double total = static_cast<double>(seen + n);
          const double delta = chunk_mean - mean[k];
          mean[k] += delta * n / total;
          m2[k] += chunk_m2 + delta * delta * static_cast<double>(seen) * n / total;
          co[k] += cross;
        }
        seen += n;
      }
      for (int k = 0; k < f.n_outputs; ++k) {
        float* m = mom_out + (t * f.n_outputs + k) * 3;
        m[0] = ok ? static_cast<float>(mean[k]) : NAN;
        m[1] = ok ? static_cast<float>(m2[k]) : NAN;
        m[2] = ok ? static_cast<float>(co[k] - mean[k] * yc_sum[k]) : NAN;
      }
      bad_out[t] = ok ? static_cast<float>(bad) : 1.0f;
    }
  });
}


// ---- normal equations for constant optimization ----------------------------------------------------

// The least-squares statistics of a tree linearized in its constants, for Levenberg-Marquardt
// (gp/constants.py). Per tree, with D_k = d f / d c_k for the constants at the positions slots[t, k]
// (k < K; an entry outside [0, tree length) or on a non-CONST node is unused: D_k = 0) and f the
// tree's output, over the rows where f is finite:
//   mean [K + 2]          means of w = (D_1 .. D_K, f, y)
//   cov  [K + 2, K + 2]   centered cross products sum (w - mean)(w - mean)^T
//   sse  [2]              sum (y - f)^2, and min over (a, b) of sum (y - a f - b)^2 = Syy - C^2 / M2
//   bad                   rows with a non-finite f (excluded; a malformed tree: nan statistics, 1)
// Everything is accumulated in double, each 256-row chunk centered on its own means and merged with
// Chan et al.'s update (as the moments handler): uncentered sums would cancel catastrophically in
// the loss Syy - C^2 / M2 of a good fit, which is all that distinguishes good trees. A non-finite
// tangent (a derivative singularity, e.g. sqrt at 0) counts as 0, as the JAX path drops it.
//
// The tangents are forward-mode dual numbers, one buffer per tracked constant, updated in place: in
// reverse prefix order a constant's buffer is set to 1 at its leaf, and at each ancestor multiplied
// by the node's partial derivative with respect to the child the constant lies under (a subtree is
// a contiguous run of positions, so that child is found by position). A product with a zero factor
// is zero even when the other factor is inf or nan, the rule of tree_eval.tree_jacobian (the
// condition of if_then_else, the unselected side of max, a protected branch). The partial
// derivatives are those jax.jvp gives for the functions of functions.py (raw or protected), also at
// the points where the derivative does not exist. A node costs one partial per child that has
// tracked constants below it and one multiply per such constant and row; a tree without constants
// costs one forward pass.

// d fn / d (child k) at each of n rows, into d; a, b, c are the children, o the node's value.
CLONES void partial(int fn, bool prot, int k, const float* __restrict a, const float* __restrict b,
                    const float* __restrict o, float* __restrict d, int n) {
  switch (fn) {
    case kAdd: std::fill(d, d + n, 1.0f); break;
    case kSub: std::fill(d, d + n, k == 0 ? 1.0f : -1.0f); break;
    case kMul: std::copy(k == 0 ? b : a, (k == 0 ? b : a) + n, d); break;
    case kDiv:
      // jax.jvp sums both operands' rules, the other operand's tangent being 0: d/da = 1 / b + (-0 a)
      // b**-2 and d/db = 0 / b - a b**-2 (nan where the zero term is 0 * inf); protected: the
      // divisor is 1 and the derivative 0 where the fallback 1 is taken
      for (int r = 0; r < n; ++r) {
        const bool ok = !prot || std::fabs(b[r]) > kEps;
        const float y = ok ? b[r] : 1.0f, inv2 = 1.0f / (y * y);
        const float v = k == 0 ? 1.0f / y + (-0.0f * a[r]) * inv2 : 0.0f / y + (-a[r]) * inv2;
        d[r] = ok ? v : 0.0f;
      }
      break;
    case kPow:
      // jax: d/dx = y * x**(y - 1), d/dy = log(x == 0 ? 1 : x) * x**y, summed with the other
      // operand's zero tangent as for div (so d/dx is nan where x < 0); protected: x = |a| (d|a|/da =
      // a >= 0 ? 1 : -1) and 0 where the fallback 1 is taken
      for (int r = 0; r < n; ++r) {
        const bool singular = prot && std::fabs(a[r]) <= kEps && b[r] < 0.0f;
        const float x = prot ? std::fabs(a[r]) : a[r];
        const float dx = b[r] * std::pow(x, b[r] - 1.0f);
        const float dy = std::log(x == 0.0f ? 1.0f : x) * o[r];
        const float sign = (!prot || a[r] >= 0.0f) ? 1.0f : -1.0f;
        const float v = k == 0 ? sign * dx + 0.0f * dy : 0.0f * dx + dy;
        d[r] = singular ? 0.0f : v;
      }
      break;
    case kMax:
    case kMin:
      // jax.numpy's maximum: 1 for the operand equal to the result, 1/2 each on a tie; a nan operand
      // makes the result a + b (functions._max): 1 each
      for (int r = 0; r < n; ++r) {
        const float x = k == 0 ? a[r] : b[r], y = k == 0 ? b[r] : a[r];
        const float m = fn == kMax ? (x > y ? x : y) : (x < y ? x : y);
        const float v = (x == m ? 1.0f : 0.0f) / (y == m ? 2.0f : 1.0f);
        d[r] = (a[r] != a[r] || b[r] != b[r]) ? 1.0f : v;
      }
      break;
    case kLt: case kGt: std::fill(d, d + n, 0.0f); break;
    case kSin: trig(kCos, a, d, n); break;
    case kCos:
      trig(kSin, a, d, n);
      for (int r = 0; r < n; ++r) d[r] = -d[r];
      break;
    case kTan: for (int r = 0; r < n; ++r) d[r] = 1.0f + o[r] * o[r]; break;
    case kSinh: map1(d, a, n, [](float x) { return std::cosh(x); }); break;
    case kCosh: map1(d, a, n, [](float x) { return std::sinh(x); }); break;
    case kTanh: for (int r = 0; r < n; ++r) d[r] = (1.0f + o[r]) * (1.0f - o[r]); break;
    case kExp:
      for (int r = 0; r < n; ++r) d[r] = (prot && a[r] > kExpClip) ? 0.0f : o[r];
      break;
    case kLog:
      for (int r = 0; r < n; ++r) d[r] = (!prot || std::fabs(a[r]) > kEps) ? 1.0f / a[r] : 0.0f;
      break;
    case kSqrt:  // jax: 0.5 / sqrt; protected: times d|a|/da (+1 at 0: inf there)
      for (int r = 0; r < n; ++r) {
        const float v = 0.5f / o[r];
        d[r] = (prot && !(a[r] >= 0.0f)) ? -v : v;
      }
      break;
    case kAbs: for (int r = 0; r < n; ++r) d[r] = a[r] >= 0.0f ? 1.0f : -1.0f; break;
    case kNeg: std::fill(d, d + n, -1.0f); break;
    case kInv:
      for (int r = 0; r < n; ++r) {
        const float v = -(1.0f / (a[r] * a[r]));
        d[r] = (!prot || std::fabs(a[r]) > kEps) ? v : 0.0f;
      }
      break;
    case kIfThenElse:
      for (int r = 0; r < n; ++r) {
        const bool cond = a[r] > 0.0f;
        d[r] = k == 0 ? 0.0f : ((k == 1) == cond ? 1.0f : 0.0f);
      }
      break;
  }
}

// t = d * t, 0 where either factor is 0 (see above).
CLONES void chain(float* __restrict t, const float* __restrict d, int n) {
  for (int r = 0; r < n; ++r) t[r] = (d[r] == 0.0f || t[r] == 0.0f) ? 0.0f : d[r] * t[r];
}

// Subtracts the mean of c[0, n) from each entry (n >= 1) and returns the mean.
CLONES double center(double* __restrict c, int n) {
  double lane[4] = {};
  int r = 0;
  for (; r + 4 <= n; r += 4)
    for (int j = 0; j < 4; ++j) lane[j] += c[r + j];
  for (; r < n; ++r) lane[0] += c[r];
  const double mean = ((lane[0] + lane[1]) + (lane[2] + lane[3])) / n;
  for (r = 0; r < n; ++r) c[r] -= mean;
  return mean;
}

// sum a[r] * b[r] in double, four independent partial sums (vectorizable without -ffast-math).
CLONES double dot(const double* __restrict a, const double* __restrict b, int n) {
  double lane[4] = {};
  int r = 0;
  for (; r + 4 <= n; r += 4)
    for (int j = 0; j < 4; ++j) lane[j] += a[r + j] * b[r + j];
  for (; r < n; ++r) lane[0] += a[r] * b[r];
  return (lane[0] + lane[1]) + (lane[2] + lane[3]);
}

// Per-thread working memory beside Scratch: K tangent rows, one partial row, the chunk's K + 2
// centered columns in double, and the running moments; about (K + 1) * 256 floats + (K + 2) * 256
// doubles. fit() releases it and rethrows when an allocation fails (as Scratch::fit).
struct TangentScratch {
  std::vector<float> tangent, part;
  std::vector<double> cols, mean, m2, chunk_mean;
  std::vector<int32_t> rows, slot, index;
  void fit(int64_t K) {
    const size_t q = static_cast<size_t>(K) + 2;
    try {
      tangent.resize(static_cast<size_t>(K) * kRows);
      part.resize(kRows);
      cols.resize(q * kRows);
      mean.resize(q);
      chunk_mean.resize(q);
      m2.resize(q * q);
      rows.resize(kRows);
      slot.resize(static_cast<size_t>(K));
      index.resize(static_cast<size_t>(K));
    } catch (...) {
      *this = TangentScratch();
      throw;
    }
  }
};

// Copies the chunk's rows with a finite output into ts.cols as double columns (tangents, then f, then
// y; a non-finite tangent as 0), adds their sum (y - f)^2 to sse and returns how many there are. All
// rows finite (the usual case) is a straight vectorizable copy; otherwise the rows are gathered.
CLONES int gather_rows(const float* __restrict root, TangentScratch& ts, int n_active, const float* __restrict y,
                       int n, double& sse) {
  int finite = 0;
  for (int r = 0; r < n; ++r) finite += std::isfinite(root[r]);
  double* __restrict cols = ts.cols.data();
  double* __restrict fc = cols + n_active * kRows;
  double* __restrict yc = cols + (n_active + 1) * kRows;
  const int32_t* rows = ts.rows.data();
  if (finite < n) {
    int m = 0;
    for (int r = 0; r < n; ++r) {
      ts.rows[m] = r;
      m += std::isfinite(root[r]);
    }
  }
  for (int j = 0; j < n_active; ++j) {
    const float* __restrict tj = ts.tangent.data() + j * kRows;
    double* __restrict cj = cols + j * kRows;
    if (finite == n) {
      for (int r = 0; r < n; ++r) cj[r] = std::isfinite(tj[r]) ? tj[r] : 0.0f;
    } else {
      for (int i = 0; i < finite; ++i) cj[i] = std::isfinite(tj[rows[i]]) ? tj[rows[i]] : 0.0f;
    }
  }
  if (finite == n) {
    for (int r = 0; r < n; ++r) {
      fc[r] = root[r];
      yc[r] = y[r];
    }
  } else {
    for (int i = 0; i < finite; ++i) {
      fc[i] = root[rows[i]];
      yc[i] = y[rows[i]];
    }
  }
  double lane[4] = {};
  int r = 0;
  for (; r + 4 <= finite; r += 4)
    for (int j = 0; j < 4; ++j) lane[j] += (yc[r + j] - fc[r + j]) * (yc[r + j] - fc[r + j]);
  for (; r < finite; ++r) lane[0] += (yc[r] - fc[r]) * (yc[r] - fc[r]);
  sse += (lane[0] + lane[1]) + (lane[2] + lane[3]);
  return finite;
}

// Evaluates single-output tree t on rows [r0, r0 + n) as eval_tree does, and leaves in
// ts.tangent[j] the derivative of the output with respect to the constant at position ts.slot[j]
// (j < n_active). Returns the output's values, or nullptr for a malformed tree.
const float* eval_tree_tangents(const Forest& f, int64_t t, int64_t r0, int n, Scratch& s, TangentScratch& ts,
                                int n_active) {
  const int32_t* op = f.opcode + t * f.max_len;
  const float* val = f.value + t * f.max_len;
  const int32_t* sz = f.size + t * f.max_len;
  const int64_t len = sz[0];
  if (len < 1 || len > f.max_len) return nullptr;
  const float** stack = s.stack.data();
  int64_t sp = 0;
  for (int64_t i = len - 1; i >= 0; --i) {
    const int32_t code = op[i];
    float* slot = s.slots.data() + i * kRows;
    if (code == kConst) {
      if (r0 == 0) std::fill(slot, slot + n, val[i]);
      for (int j = 0; j < n_active; ++j)
        if (ts.slot[j] == i) std::fill(ts.tangent.data() + j * kRows, ts.tangent.data() + j * kRows + n, 1.0f);
      stack[sp++] = slot;
    } else if (code == kVar) {
      const float fv = val[i];
      const int64_t v = fv >= 1.0f ? std::min<int64_t>(static_cast<int64_t>(std::min(fv, 1e9f)), f.n_vars - 1) : 0;
      stack[sp++] = f.xt + v * f.n_points + r0;
    } else {
      if (code < 0 || code >= f.n_opcodes) return nullptr;
      const int32_t fn = f.table[code];
      if (fn < 0 || fn >= kNumFns) return nullptr;
      const int arity = kFnArity[fn];
      if (sp < arity) return nullptr;
      const float* a = stack[sp - 1];
      const float* b = arity >= 2 ? stack[sp - 2] : a;
      const float* c = arity >= 3 ? stack[sp - 3] : a;
      apply(fn, f.prot, slot, a, b, c, n);
      // child k occupies positions [start, start + size): the constants there get its partial
      int64_t start = i + 1;
      for (int k = 0; k < arity && n_active > 0; ++k) {
        if (start >= len || sz[start] < 1 || start + sz[start] > len) return nullptr;
        const int64_t end = start + sz[start];
        bool have = false;
        for (int j = 0; j < n_active; ++j) {
          if (ts.slot[j] < start || ts.slot[j] >= end) continue;
          if (!have) partial(fn, f.prot, k, a, b, slot, ts.part.data(), n);
          have = true;
          chain(ts.tangent.data() + j * kRows, ts.part.data(), n);
        }
        start = end;
      }
      sp -= arity;
      stack[sp++] = slot;
    }
  }
  if (sp != 1) return nullptr;
  return stack[0];
}

ffi::Error normal_equations_impl(ffi::ThreadPool pool, ffi::Buffer<ffi::S32> opcode, ffi::Buffer<ffi::F32> value,
                                 ffi::Buffer<ffi::S32> size, ffi::Buffer<ffi::S32> output,
                                 ffi::Buffer<ffi::F32> xt, ffi::Buffer<ffi::F32> yt, ffi::Buffer<ffi::S32> slots,
                                 ffi::Buffer<ffi::S32> table, int32_t prot, ffi::ResultBuffer<ffi::F32> mean_out,
                                 ffi::ResultBuffer<ffi::F32> cov_out, ffi::ResultBuffer<ffi::F32> sse_out,
                                 ffi::ResultBuffer<ffi::F32> bad_out) {
  const Forest f = make_forest(opcode, value, size, output, xt, table, 1, prot);
  if (auto e = check_forest(f, opcode.dimensions(), value.dimensions(), size.dimensions(),
                            output.dimensions(), xt.dimensions());
      !e.success())
    return e;
  auto dy = yt.dimensions();
  if (dy.size() != 2 || dy[0] != 1 || dy[1] != f.n_points)
    return ffi::Error::InvalidArgument("yt must be [1, n_points]");
  auto ds = slots.dimensions();
  if (ds.size() != 2 || ds[0] != f.pop) return ffi::Error::InvalidArgument("slots must be [pop, K]");
  const int64_t K = ds[1], Q = K + 2;
  if (mean_out->element_count() != static_cast<size_t>(f.pop * Q) ||
      cov_out->element_count() != static_cast<size_t>(f.pop * Q * Q) ||
      sse_out->element_count() != static_cast<size_t>(f.pop * 2) ||
      bad_out->element_count() != static_cast<size_t>(f.pop))
    return ffi::Error::InvalidArgument("outputs must be mean [pop, K+2], cov [pop, K+2, K+2], sse [pop, 2], bad [pop]");
  const int32_t* slot_in = slots.typed_data();
  const float* y = yt.typed_data();
  float* mean_o = mean_out->typed_data();
  float* cov_o = cov_out->typed_data();
  float* sse_o = sse_out->typed_data();
  float* bad_o = bad_out->typed_data();
  return parallel_trees(pool, f.pop, [&](int64_t t0, int64_t t1) {
    thread_local Scratch s;
    thread_local TangentScratch ts;
    s.fit(f);
    ts.fit(K);
    for (int64_t t = t0; t < t1; ++t) {
      const int32_t* op = f.opcode + t * f.max_len;
      const int64_t len = f.size[t * f.max_len];
      // the tracked constants: compact index j -> position ts.slot[j], output index ts.index[j]
      int n_active = 0;
      for (int64_t k = 0; k < K && len >= 1 && len <= f.max_len; ++k) {
        const int32_t p = slot_in[t * K + k];
        if (p < 0 || p >= len || op[p] != kConst) continue;
        ts.slot[n_active] = p;
        ts.index[n_active] = static_cast<int32_t>(k);
        ++n_active;
      }
      const int q = n_active + 2, fq = n_active, yq = n_active + 1;  // columns: tangents, f, y
      std::fill(ts.mean.begin(), ts.mean.begin() + q, 0.0);
      std::fill(ts.m2.begin(), ts.m2.begin() + static_cast<size_t>(q) * q, 0.0);
      double sse = 0.0;
      int64_t bad = 0, seen = 0;
      bool ok = true;
      for (int64_t r0 = 0; r0 < f.n_points; r0 += kRows) {
        const int n = static_cast<int>(std::min<int64_t>(kRows, f.n_points - r0));
        const float* root = eval_tree_tangents(f, t, r0, n, s, ts, n_active);
        if (!root) {
          ok = false;
          break;
        }
        const int m = gather_rows(root, ts, n_active, y + r0, n, sse);
        bad += n - m;
        if (m == 0) continue;
        double* cols = ts.cols.data();
        // center the chunk on its own means, then merge (Chan et al.)
        const double total = static_cast<double>(seen + m);
        for (int p = 0; p < q; ++p) ts.chunk_mean[p] = center(cols + p * kRows, m);
        const double weight = static_cast<double>(seen) * m / total;
        for (int p = 0; p < q; ++p) {
          const double dp = ts.chunk_mean[p] - ts.mean[p];
          for (int r = p; r < q; ++r) {
            const double dr = ts.chunk_mean[r] - ts.mean[r];
            ts.m2[p * q + r] += dot(cols + p * kRows, cols + r * kRows, m) + dp * dr * weight;
          }
        }
        for (int p = 0; p < q; ++p) ts.mean[p] += (ts.chunk_mean[p] - ts.mean[p]) * m / total;
        seen += m;
      }
      float* mo = mean_o + t * Q;
      float* co = cov_o + t * Q * Q;
      if (!ok) {
        std::fill(mo, mo + Q, NAN);
        std::fill(co, co + Q * Q, NAN);
        sse_o[2 * t] = sse_o[2 * t + 1] = NAN;
        bad_o[t] = 1.0f;
        continue;
      }
      // output index of compact column p
      auto out = [&](int p) -> int64_t { return p < n_active ? ts.index[p] : (p == fq ? K : K + 1); };
      std::fill(mo, mo + Q, 0.0f);
      std::fill(co, co + Q * Q, 0.0f);
      for (int p = 0; p < q; ++p) {
        mo[out(p)] = static_cast<float>(ts.mean[p]);
        for (int r = p; r < q; ++r) {
          const float v = static_cast<float>(ts.m2[p * q + r]);
          co[out(p) * Q + out(r)] = v;
          co[out(r) * Q + out(p)] = v;
        }
      }
      const double m2 = ts.m2[fq * q + fq], cy = ts.m2[fq * q + yq], syy = ts.m2[yq * q + yq];
      sse_o[2 * t] = static_cast<float>(sse);
      sse_o[2 * t + 1] = static_cast<float>(m2 > 0.0 ? std::max(syy - cy * cy / m2, 0.0) : syy);
      bad_o[t] = static_cast<float>(bad);
    }
  });
}

}  // namespace

XLA_FFI_DEFINE_HANDLER_SYMBOL(EvotensorGpForward, forward_impl,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::ThreadPool>()
                                  .Arg<ffi::Buffer<ffi::S32>>()  // opcode
                                  .Arg<ffi::Buffer<ffi::F32>>()  // value
                                  .Arg<ffi::Buffer<ffi::S32>>()  // size
                                  .Arg<ffi::Buffer<ffi::S32>>()  // output
                                  .Arg<ffi::Buffer<ffi::F32>>()  // xt
                                  .Arg<ffi::Buffer<ffi::S32>>()  // table
                                  .Attr<int32_t>("n_outputs")
                                  .Attr<int32_t>("protected")
                                  .Ret<ffi::Buffer<ffi::F32>>());  // pred

XLA_FFI_DEFINE_HANDLER_SYMBOL(EvotensorGpFitness, fitness_impl,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::ThreadPool>()
                                  .Arg<ffi::Buffer<ffi::S32>>()  // opcode
                                  .Arg<ffi::Buffer<ffi::F32>>()  // value
                                  .Arg<ffi::Buffer<ffi::S32>>()  // size
                                  .Arg<ffi::Buffer<ffi::S32>>()  // output
                                  .Arg<ffi::Buffer<ffi::F32>>()  // xt
                                  .Arg<ffi::Buffer<ffi::F32>>()  // yt
                                  .Arg<ffi::Buffer<ffi::S32>>()  // table
                                  .Attr<int32_t>("n_outputs")
                                  .Attr<int32_t>("metric")
                                  .Attr<int32_t>("protected")
                                  .Ret<ffi::Buffer<ffi::F32>>()   // term_sum
                                  .Ret<ffi::Buffer<ffi::F32>>());  // bad_sum

XLA_FFI_DEFINE_HANDLER_SYMBOL(EvotensorGpMoments, moments_impl,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::ThreadPool>()
                                  .Arg<ffi::Buffer<ffi::S32>>()  // opcode
                                  .Arg<ffi::Buffer<ffi::F32>>()  // value
                                  .Arg<ffi::Buffer<ffi::S32>>()  // size
                                  .Arg<ffi::Buffer<ffi::S32>>()  // output
                                  .Arg<ffi::Buffer<ffi::F32>>()  // xt
                                  .Arg<ffi::Buffer<ffi::F32>>()  // yct (centered targets)
                                  .Arg<ffi::Buffer<ffi::S32>>()  // table
                                  .Attr<int32_t>("n_outputs")
                                  .Attr<int32_t>("protected")
                                  .Ret<ffi::Buffer<ffi::F32>>()   // moments
                                  .Ret<ffi::Buffer<ffi::F32>>());  // bad_sum

XLA_FFI_DEFINE_HANDLER_SYMBOL(EvotensorGpNormalEquations, normal_equations_impl,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::ThreadPool>()
                                  .Arg<ffi::Buffer<ffi::S32>>()  // opcode
                                  .Arg<ffi::Buffer<ffi::F32>>()  // value
                                  .Arg<ffi::Buffer<ffi::S32>>()  // size
                                  .Arg<ffi::Buffer<ffi::S32>>()  // output
                                  .Arg<ffi::Buffer<ffi::F32>>()  // xt
                                  .Arg<ffi::Buffer<ffi::F32>>()  // yt [1, n_points]
                                  .Arg<ffi::Buffer<ffi::S32>>()  // slots [pop, K]
                                  .Arg<ffi::Buffer<ffi::S32>>()  // table
                                  .Attr<int32_t>("protected")
                                  .Ret<ffi::Buffer<ffi::F32>>()   // mean [pop, K + 2]
                                  .Ret<ffi::Buffer<ffi::F32>>()   // cov [pop, K + 2, K + 2]
                                  .Ret<ffi::Buffer<ffi::F32>>()   // sse [pop, 2]
                                  .Ret<ffi::Buffer<ffi::F32>>());  // bad [pop]

// ---- the Python module: handler capsules and the function-id order ---------------------------------

static PyObject* handlers(PyObject*, PyObject*) {
  PyObject* d = PyDict_New();
  if (!d) return nullptr;
  const std::pair<const char*, void*> items[] = {
      {"evotensor_gp_forward", reinterpret_cast<void*>(EvotensorGpForward)},
      {"evotensor_gp_fitness", reinterpret_cast<void*>(EvotensorGpFitness)},
      {"evotensor_gp_moments", reinterpret_cast<void*>(EvotensorGpMoments)},
      {"evotensor_gp_normal_equations", reinterpret_cast<void*>(EvotensorGpNormalEquations)}};
  for (const auto& [name, fn] : items) {
    PyObject* cap = PyCapsule_New(fn, nullptr, nullptr);
    if (!cap || PyDict_SetItemString(d, name, cap) < 0) {
      Py_XDECREF(cap);
      Py_DECREF(d);
      return nullptr;
    }
    Py_DECREF(cap);
  }
  return d;
}

static PyObject* function_names(PyObject*, PyObject*) {
  PyObject* t = PyTuple_New(kNumFns);
  if (!t) return nullptr;
  for (int i = 0; i < kNumFns; ++i) {
    PyObject* s = PyUnicode_FromString(kFnNames[i]);
    if (!s) {
      Py_DECREF(t);
      return nullptr;
    }
    PyTuple_SET_ITEM(t, i, s);
  }
  return t;
}

#ifndef EVOTENSOR_JAXLIB_VERSION
#define EVOTENSOR_JAXLIB_VERSION "unknown"
#endif

static PyObject* built_against(PyObject*, PyObject*) { return PyUnicode_FromString(EVOTENSOR_JAXLIB_VERSION); }

static PyMethodDef kMethods[] = {
    {"built_against", built_against, METH_NOARGS, "the jaxlib version whose FFI headers this was built with"},
    {"handlers", handlers, METH_NOARGS, "{target name: PyCapsule of the XLA FFI handler}"},
    {"function_names", function_names, METH_NOARGS, "builtin function names in function-id order"},
    {nullptr, nullptr, 0, nullptr}};

static PyModuleDef kModule = {PyModuleDef_HEAD_INIT, "_native",
                              "Native CPU evaluator of GP forests (XLA FFI handlers).", -1, kMethods};

PyMODINIT_FUNC PyInit__native(void) { return PyModule_Create(&kModule); }
