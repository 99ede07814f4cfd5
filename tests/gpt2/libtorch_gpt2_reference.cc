// libtorch_gpt2_reference.cc - an independent GPT-2 in LibTorch 1.13 (CPU): the reference that
// tandem's GPT-2 is checked against (logits, loss, every gradient, AdamW losses), in the spirit of
// llm.c's test_gpt2. It is written from the GPT-2 paper and Hugging Face's checkpoint layout only,
// and uses none of this repository's libraries.
//
//   libtorch_gpt2_reference --weights W.safetensors --batch B.safetensors --out O.safetensors
//       [--heads 12] [--steps 10] [--lr 1e-4] [--beta1 0.9] [--beta2 0.95] [--eps 1e-8]
//       [--weight-decay 0.1] [--clip 0] [--dtype f32|f64] [--threads N] [--time-steps 0]
//
// Weights (safetensors, Hugging Face GPT-2 names, F32): wte.weight [V, C] (also the output head,
// tied), wpe.weight [P, C], for each block i: h.i.ln_1.{weight,bias} [C],
// h.i.attn.c_attn.weight [C, 3C] / .bias [3C] (Conv1D: y = x W + b; columns q | k | v, head h in
// columns h*hd..(h+1)*hd of each), h.i.attn.c_proj.weight [C, C] / .bias [C], h.i.ln_2.* [C],
// h.i.mlp.c_fc.weight [C, 4C] / .bias [4C], h.i.mlp.c_proj.weight [4C, C] / .bias [C];
// ln_f.{weight,bias} [C]. h.i.attn.bias / h.i.attn.masked_bias (HF's mask buffers) are ignored.
// V, C, P and L come from the shapes, the head count from --heads.
//
// Model: x = wte[ids] + wpe[0..T); per block x += attn(ln_1(x)); x += mlp(ln_2(x)) with
// mlp(u) = c_proj(gelu_tanh(c_fc(u))) and causal softmax(q k^T / sqrt(hd)) v attention;
// logits = ln_f(x) wte^T; loss = mean cross-entropy over the B x T positions. LayerNorm eps 1e-5.
//
// Batch (safetensors): ids I32 [B, T], targets I32 [B, T].
// Output (safetensors, F32, or F64 under --dtype f64, where the weights are converted to f64 after
// loading and everything is computed in f64): logits [B, T, V], loss [] (of the initial weights),
// grad.<name> for every parameter (HF name and shape), losses [steps]: losses[k] is the loss
// before AdamW update k (torch::optim::AdamW; weight decay for the parameters of 2+ dimensions,
// none for biases and LayerNorm; --clip C > 0: clip_grad_norm_(all, C) before each step), and
// __metadata__ with the configuration.
//
// --time-steps N > 0: benchmark instead: one warm-up step, then N timed training steps (forward,
// backward, AdamW step, zero_grad), one line in ../shared/bench's format
// (name=libtorch_gpt2_step.t<threads> ... median_ms=...), with tokens_per_s and peak_rss_mb
// (getrusage ru_maxrss). --out is optional there and not written.
//
// Errors (missing tensor, wrong shape, C not divisible by the heads, T > P, ids out of range)
// print one message naming the tensor and exit 1.
#include <dlfcn.h>
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <limits>
#include <map>
#include <memory>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <torch/torch.h>
#include <nlohmann/json.hpp>

namespace {

namespace F = torch::nn::functional;
using torch::Tensor;

// ---- errors -----------------------------------------------------------------------------------

struct Fatal : std::runtime_error {
  using std::runtime_error::runtime_error;
};

template <typename... A>
[[noreturn]] void fail(const A&... a) {
  std::ostringstream os;
  (os << ... << a);
  throw Fatal(os.str());
}

std::string shape_str(torch::IntArrayRef s) {
  std::string out = "[";
  for (std::size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

// The shortest %g form that reads back as v (0.9, not 0.90000000000000002).
std::string num_str(double v) {
  char buf[64];
  for (int prec = 1; prec <= 17; ++prec) {
    std::snprintf(buf, sizeof buf, "%.*g", prec, v);
    if (std::strtod(buf, nullptr) == v) break;
  }
  return buf;
}

// ---- safetensors --------------------------------------------------------------------------------
// 8-byte little-endian header length N, N bytes of JSON {name: {"dtype", "shape", "data_offsets":
// [begin, end)}, "__metadata__": {string: string}} (padded with spaces), then the data; offsets are
// relative to the first byte after the header.

struct DtypeName {
  const char* name;
  torch::Dtype dtype;
};
const DtypeName kDtypes[] = {{"F64", torch::kFloat64},   {"F32", torch::kFloat32}, {"F16", torch::kFloat16},
                             {"BF16", torch::kBFloat16}, {"I64", torch::kInt64},   {"I32", torch::kInt32},
                             {"I16", torch::kInt16},     {"I8", torch::kInt8},     {"U8", torch::kUInt8},
                             {"BOOL", torch::kBool}};

std::string dtype_name(torch::Dtype d) {
  for (const auto& e : kDtypes)
    if (e.dtype == d) return e.name;
  fail("no safetensors name for dtype ", c10::toString(d));
}

struct SafeTensors {
  std::map<std::string, Tensor> tensors;
  std::map<std::string, std::string> metadata;
  std::string path;

  bool has(const std::string& name) const { return tensors.count(name) != 0; }
  const Tensor& get(const std::string& name) const {
    auto it = tensors.find(name);
    if (it == tensors.end()) fail(path, ": missing tensor '", name, "'");
    return it->second;
  }
};

uint64_t read_le64(const unsigned char* b) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | b[i];
  return v;
}

SafeTensors read_safetensors(const std::string& path) {
  SafeTensors out;
  out.path = path;
  std::ifstream f(path, std::ios::binary);
  if (!f) fail("cannot open '", path, "'");
  f.seekg(0, std::ios::end);
  const uint64_t file_size = static_cast<uint64_t>(f.tellg());
  f.seekg(0);
  unsigned char len[8];
  if (file_size < 8 || !f.read(reinterpret_cast<char*>(len), 8))
    fail(path, ": not a safetensors file (shorter than 8 bytes)");
  const uint64_t n = read_le64(len);
  if (n > file_size - 8) fail(path, ": header length ", n, " runs past the end of the file (", file_size, " bytes)");
  std::string header(n, '\0');
  if (!f.read(header.data(), static_cast<std::streamsize>(n))) fail(path, ": cannot read the header");
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(header);
  } catch (const nlohmann::json::exception& e) { fail(path, ": the header is not JSON: ", e.what()); }
  if (!j.is_object()) fail(path, ": the header is not a JSON object");
  const uint64_t data_start = 8 + n, data_size = file_size - data_start;
  for (const auto& [name, info] : j.items()) {
    if (name == "__metadata__") {
      if (info.is_object())
        for (const auto& [k, v] : info.items()) out.metadata[k] = v.is_string() ? v.get<std::string>() : v.dump();
      continue;
    }
    try {
      const std::string dt = info.at("dtype").get<std::string>();
      const DtypeName* found = nullptr;
      for (const auto& e : kDtypes)
        if (dt == e.name) found = &e;
      if (!found) fail(path, ": tensor '", name, "' has unsupported dtype ", dt);
      std::vector<int64_t> shape;
      for (const auto& d : info.at("shape")) {
        const int64_t v = d.get<int64_t>();
        if (v < 0) fail(path, ": tensor '", name, "' has a negative dimension");
        shape.push_back(v);
      }
      const auto& off = info.at("data_offsets");
      if (!off.is_array() || off.size() != 2) fail(path, ": tensor '", name, "': data_offsets is not [begin, end]");
      const uint64_t b = off[0].get<uint64_t>(), e = off[1].get<uint64_t>();
      Tensor t = torch::empty(shape, torch::TensorOptions().dtype(found->dtype));
      const uint64_t nbytes = static_cast<uint64_t>(t.numel()) * t.element_size();
      if (e < b || e - b != nbytes)
        fail(path, ": tensor '", name, "' (", dt, " ", shape_str(shape), ", ", nbytes, " bytes) has data_offsets [", b,
             ", ", e, "]");
      if (e > data_size) fail(path, ": tensor '", name, "' runs past the end of the file");
      if (nbytes > 0) {
        f.seekg(static_cast<std::streamoff>(data_start + b));
        if (!f.read(static_cast<char*>(t.data_ptr()), static_cast<std::streamsize>(nbytes)))
          fail(path, ": cannot read tensor '", name, "'");
      }
      out.tensors[name] = t;
    } catch (const nlohmann::json::exception& e) { fail(path, ": bad header entry for '", name, "': ", e.what()); }
  }
  return out;
}

void write_safetensors(const std::string& path, const std::vector<std::pair<std::string, Tensor>>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  nlohmann::ordered_json h = nlohmann::ordered_json::object();
  if (!metadata.empty()) {
    nlohmann::ordered_json m = nlohmann::ordered_json::object();
    for (const auto& [k, v] : metadata) m[k] = v;
    h["__metadata__"] = m;
  }
  std::vector<Tensor> data;
  uint64_t offset = 0;
  for (const auto& [name, t0] : tensors) {
    Tensor t = t0.detach().cpu().contiguous();
    const uint64_t nbytes = static_cast<uint64_t>(t.numel()) * t.element_size();
    h[name] = {{"dtype", dtype_name(t.scalar_type())},
               {"shape", t.sizes().vec()},
               {"data_offsets", {offset, offset + nbytes}}};
    offset += nbytes;
    data.push_back(t);
  }
  std::string header = h.dump();
  header.append((8 - header.size() % 8) % 8, ' ');
  unsigned char len[8];
  for (int i = 0; i < 8; ++i)
    len[i] = static_cast<unsigned char>((static_cast<uint64_t>(header.size()) >> (8 * i)) & 0xff);
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  if (!f) fail("cannot create '", path, "'");
  f.write(reinterpret_cast<const char*>(len), 8);
  f.write(header.data(), static_cast<std::streamsize>(header.size()));
  for (const auto& t : data)
    f.write(static_cast<const char*>(t.data_ptr()), static_cast<std::streamsize>(t.numel() * t.element_size()));
  f.close();
  if (!f) fail("cannot write '", path, "'");
}

// ---- the model ----------------------------------------------------------------------------------

struct Config {
  int64_t V = 0, C = 0, P = 0, L = 0, H = 0;
};

const char* const kBlockParams[] = {"ln_1.weight",        "ln_1.bias",        "attn.c_attn.weight", "attn.c_attn.bias",
                                    "attn.c_proj.weight", "attn.c_proj.bias", "ln_2.weight",        "ln_2.bias",
                                    "mlp.c_fc.weight",    "mlp.c_fc.bias",    "mlp.c_proj.weight",  "mlp.c_proj.bias"};

std::vector<int64_t> block_param_shape(const std::string& p, int64_t C) {
  if (p == "attn.c_attn.weight") return {C, 3 * C};
  if (p == "attn.c_attn.bias") return {3 * C};
  if (p == "attn.c_proj.weight") return {C, C};
  if (p == "mlp.c_fc.weight") return {C, 4 * C};
  if (p == "mlp.c_fc.bias") return {4 * C};
  if (p == "mlp.c_proj.weight") return {4 * C, C};
  return {C};  // ln_*.weight/bias, attn.c_proj.bias, mlp.c_proj.bias
}

struct Model {
  Config cfg;
  std::vector<std::pair<std::string, Tensor>> params;  // HF names, HF order; leaves with requires_grad
  std::map<std::string, Tensor> by_name;

  const Tensor& p(const std::string& name) const { return by_name.at(name); }
  const Tensor& b(int64_t i, const char* name) const { return by_name.at("h." + std::to_string(i) + "." + name); }
  std::vector<Tensor> tensors() const {
    std::vector<Tensor> out;
    for (const auto& [n, t] : params) out.push_back(t);
    return out;
  }
};

Model load_model(const SafeTensors& st, int64_t heads, torch::Dtype dtype) {
  Model m;
  const Tensor& wte = st.get("wte.weight");
  const Tensor& wpe = st.get("wpe.weight");
  if (wte.dim() != 2) fail(st.path, ": wte.weight has shape ", shape_str(wte.sizes()), ", expected [V, C]");
  if (wpe.dim() != 2) fail(st.path, ": wpe.weight has shape ", shape_str(wpe.sizes()), ", expected [P, C]");
  Config& c = m.cfg;
  c.V = wte.size(0);
  c.C = wte.size(1);
  c.P = wpe.size(0);
  c.H = heads;
  if (wpe.size(1) != c.C)
    fail(st.path, ": wpe.weight has shape ", shape_str(wpe.sizes()), ", expected [P, ", c.C, "] (C from wte.weight)");
  if (c.V < 1 || c.C < 1 || c.P < 1) fail(st.path, ": empty wte.weight or wpe.weight");
  if (heads < 1) fail("--heads must be positive, got ", heads);
  if (c.C % heads != 0)
    fail("C = ", c.C, " (wte.weight ", shape_str(wte.sizes()), ") is not divisible by --heads ", heads);

  // L = 1 + the largest block index named; every block below it must be complete.
  std::set<std::string> expected = {"wte.weight", "wpe.weight", "ln_f.weight", "ln_f.bias"};
  int64_t L = 0;
  for (const auto& [name, t] : st.tensors) {
    if (name.rfind("h.", 0) != 0) continue;
    const std::size_t dot = name.find('.', 2);
    const std::string idx = name.substr(2, dot == std::string::npos ? std::string::npos : dot - 2);
    if (idx.empty() || idx.find_first_not_of("0123456789") != std::string::npos) continue;
    L = std::max<int64_t>(L, std::stoll(idx) + 1);
  }
  if (L == 0) fail(st.path, ": no transformer blocks (h.0.ln_1.weight, ...)");
  c.L = L;

  auto add = [&](const std::string& name, const std::vector<int64_t>& shape) {
    const Tensor& t = st.get(name);
    if (t.sizes().vec() != shape)
      fail(st.path, ": tensor '", name, "' has shape ", shape_str(t.sizes()), ", expected ", shape_str(shape),
           " (V=", c.V, " C=", c.C, " P=", c.P, ")");
    if (!t.is_floating_point())
      fail(st.path, ": tensor '", name, "' has dtype ", dtype_name(t.scalar_type()), ", expected F32");
    // detach(): a new leaf that shares the loaded storage (the file's copy is freed after loading).
    Tensor p = t.to(dtype).contiguous().detach().set_requires_grad(true);
    m.params.emplace_back(name, p);
    m.by_name[name] = p;
    expected.insert(name);
  };
  add("wte.weight", {c.V, c.C});
  add("wpe.weight", {c.P, c.C});
  for (int64_t i = 0; i < L; ++i)
    for (const char* p : kBlockParams) add("h." + std::to_string(i) + "." + p, block_param_shape(p, c.C));
  add("ln_f.weight", {c.C});
  add("ln_f.bias", {c.C});

  for (const auto& [name, t] : st.tensors) {
    if (expected.count(name)) continue;
    const bool mask_buffer =
        name.rfind("h.", 0) == 0 &&
        (name.size() > 10 && (name.compare(name.size() - 10, 10, ".attn.bias") == 0 ||
                              (name.size() > 17 && name.compare(name.size() - 17, 17, ".attn.masked_bias") == 0)));
    if (!mask_buffer)
      std::fprintf(stderr, "libtorch_gpt2_reference: note: ignoring tensor '%s' (not a GPT-2 parameter)\n",
                   name.c_str());
  }
  return m;
}

// ids [B, T] (int64) -> logits [B, T, V].
Tensor forward(const Model& m, const Tensor& ids) {
  const Config& c = m.cfg;
  const int64_t B = ids.size(0), T = ids.size(1), C = c.C, H = c.H, hd = C / H;
  const double eps = 1e-5;
  Tensor x = m.p("wte.weight").index_select(0, ids.reshape({-1})).view({B, T, C}) + m.p("wpe.weight").slice(0, 0, T);
  const Tensor causal = torch::ones({T, T}, torch::kBool).triu(1);  // true where key j > query i
  const double scale = 1.0 / std::sqrt(static_cast<double>(hd));
  for (int64_t i = 0; i < c.L; ++i) {
    // attention
    Tensor u = torch::layer_norm(x, {C}, m.b(i, "ln_1.weight"), m.b(i, "ln_1.bias"), eps);
    Tensor qkv = torch::addmm(m.b(i, "attn.c_attn.bias"), u.reshape({B * T, C}), m.b(i, "attn.c_attn.weight"));
    qkv = qkv.view({B, T, 3, H, hd});
    Tensor q = qkv.select(2, 0).permute({0, 2, 1, 3});  // [B, H, T, hd]
    Tensor k = qkv.select(2, 1).permute({0, 2, 1, 3});
    Tensor v = qkv.select(2, 2).permute({0, 2, 1, 3});
    Tensor att = torch::matmul(q, k.transpose(-2, -1)) * scale;  // [B, H, T, T]
    att = torch::softmax(att.masked_fill(causal, -std::numeric_limits<double>::infinity()), -1);
    Tensor y = torch::matmul(att, v).permute({0, 2, 1, 3}).reshape({B * T, C});  // heads concatenated
    x = x + torch::addmm(m.b(i, "attn.c_proj.bias"), y, m.b(i, "attn.c_proj.weight")).view({B, T, C});
    // MLP
    u = torch::layer_norm(x, {C}, m.b(i, "ln_2.weight"), m.b(i, "ln_2.bias"), eps);
    Tensor f = torch::addmm(m.b(i, "mlp.c_fc.bias"), u.reshape({B * T, C}), m.b(i, "mlp.c_fc.weight"));
    f = torch::gelu(f, "tanh");  // 0.5 f (1 + tanh(sqrt(2/pi) (f + 0.044715 f^3)))
    x = x + torch::addmm(m.b(i, "mlp.c_proj.bias"), f, m.b(i, "mlp.c_proj.weight")).view({B, T, C});
  }
  x = torch::layer_norm(x, {C}, m.p("ln_f.weight"), m.p("ln_f.bias"), eps);
  return torch::matmul(x.reshape({B * T, C}), m.p("wte.weight").t()).view({B, T, c.V});
}

Tensor loss_of(const Tensor& logits, const Tensor& targets) {
  const int64_t V = logits.size(-1);
  return F::cross_entropy(logits.reshape({-1, V}), targets.reshape({-1}));  // mean over B*T
}

// ---- the batch ----------------------------------------------------------------------------------

struct Batch {
  Tensor ids, targets;  // int64 [B, T]
  int64_t B = 0, T = 0;
};

Tensor token_tensor(const SafeTensors& st, const std::string& name, int64_t V) {
  const Tensor& t = st.get(name);
  if (t.scalar_type() != torch::kInt32 && t.scalar_type() != torch::kInt64)
    fail(st.path, ": tensor '", name, "' has dtype ", dtype_name(t.scalar_type()), ", expected I32");
  if (t.dim() != 2 || t.numel() == 0)
    fail(st.path, ": tensor '", name, "' has shape ", shape_str(t.sizes()), ", expected [B, T]");
  Tensor l = t.to(torch::kInt64);
  Tensor bad = ((l < 0) | (l >= V)).nonzero();
  if (bad.size(0) > 0) {
    const int64_t b = bad[0][0].item<int64_t>(), s = bad[0][1].item<int64_t>();
    fail(st.path, ": ", name, "[", b, ", ", s, "] = ", l[b][s].item<int64_t>(), " is out of range [0, V=", V, ") (",
         bad.size(0), " entries out of range)");
  }
  return l;
}

Batch load_batch(const SafeTensors& st, const Config& c) {
  Batch b;
  b.ids = token_tensor(st, "ids", c.V);
  b.targets = token_tensor(st, "targets", c.V);
  if (b.targets.sizes() != b.ids.sizes())
    fail(st.path, ": targets has shape ", shape_str(b.targets.sizes()), ", ids ", shape_str(b.ids.sizes()),
         ": they must match");
  b.B = b.ids.size(0);
  b.T = b.ids.size(1);
  if (b.T > c.P)
    fail(st.path, ": T = ", b.T, " (ids ", shape_str(b.ids.sizes()), ") > P = ", c.P, " positions of wpe.weight");
  return b;
}

// ---- command line -------------------------------------------------------------------------------

struct Args {
  std::string weights, batch, out, dtype = "f32";
  int64_t heads = 12, steps = 10, threads = 0, time_steps = 0;
  double lr = 1e-4, beta1 = 0.9, beta2 = 0.95, eps = 1e-8, weight_decay = 0.1, clip = 0;
};

const char kUsage[] =
    "usage: libtorch_gpt2_reference --weights W.safetensors --batch B.safetensors --out O.safetensors\n"
    "         [--heads 12] [--steps 10] [--lr 1e-4] [--beta1 0.9] [--beta2 0.95] [--eps 1e-8]\n"
    "         [--weight-decay 0.1] [--clip 0] [--dtype f32|f64] [--threads N] [--time-steps 0]\n";

Args parse_args(int argc, char** argv) {
  Args a;
  std::map<std::string, std::string> kv;
  for (int i = 1; i < argc; ++i) {
    std::string s = argv[i];
    if (s == "-h" || s == "--help") {
      std::fputs(kUsage, stdout);
      std::exit(0);
    }
    if (s.rfind("--", 0) != 0) fail("unexpected argument '", s, "'\n", kUsage);
    std::string key = s.substr(2), value;
    const std::size_t eq = key.find('=');
    if (eq != std::string::npos) {
      value = key.substr(eq + 1);
      key = key.substr(0, eq);
    } else {
      if (i + 1 >= argc) fail("--", key, " needs a value\n", kUsage);
      value = argv[++i];
    }
    kv[key] = value;
  }
  auto num = [](const std::string& k, const std::string& v) {
    std::size_t pos = 0;
    double d = 0;
    try {
      d = std::stod(v, &pos);
    } catch (const std::exception&) { pos = 0; }
    if (pos == 0 || pos != v.size() || !std::isfinite(d)) fail("--", k, ": '", v, "' is not a number");
    return d;
  };
  auto integer = [&](const std::string& k, const std::string& v) {
    const double d = num(k, v);
    if (d != std::floor(d) || d < 0) fail("--", k, ": '", v, "' is not a non-negative integer");
    return static_cast<int64_t>(d);
  };
  for (const auto& [k, v] : kv) {
    if (k == "weights") a.weights = v;
    else if (k == "batch") a.batch = v;
    else if (k == "out") a.out = v;
    else if (k == "dtype") a.dtype = v;
    else if (k == "heads") a.heads = integer(k, v);
    else if (k == "steps") a.steps = integer(k, v);
    else if (k == "threads") a.threads = integer(k, v);
    else if (k == "time-steps") a.time_steps = integer(k, v);
    else if (k == "lr") a.lr = num(k, v);
    else if (k == "beta1") a.beta1 = num(k, v);
    else if (k == "beta2") a.beta2 = num(k, v);
    else if (k == "eps") a.eps = num(k, v);
    else if (k == "weight-decay") a.weight_decay = num(k, v);
    else if (k == "clip") a.clip = num(k, v);
    else fail("unknown option --", k, "\n", kUsage);
  }
  if (a.weights.empty()) fail("--weights is required\n", kUsage);
  if (a.batch.empty()) fail("--batch is required\n", kUsage);
  if (a.out.empty() && a.time_steps == 0) fail("--out is required (unless --time-steps N > 0)\n", kUsage);
  if (a.dtype != "f32" && a.dtype != "f64") fail("--dtype must be f32 or f64, got '", a.dtype, "'");
  if (a.heads < 1) fail("--heads must be positive");
  return a;
}

// ---- optimizer ----------------------------------------------------------------------------------

std::unique_ptr<torch::optim::AdamW> make_adamw(const Model& m, const Args& a) {
  std::vector<Tensor> decay, no_decay;
  for (const auto& [name, t] : m.params) (t.dim() >= 2 ? decay : no_decay).push_back(t);
  torch::optim::AdamWOptions base(a.lr);
  base.betas(std::make_tuple(a.beta1, a.beta2)).eps(a.eps).amsgrad(false);
  auto with_decay = std::make_unique<torch::optim::AdamWOptions>(base);
  with_decay->weight_decay(a.weight_decay);
  auto without = std::make_unique<torch::optim::AdamWOptions>(base);
  without->weight_decay(0.0);
  std::vector<torch::optim::OptimizerParamGroup> groups;
  groups.emplace_back(decay, std::move(with_decay));
  groups.emplace_back(no_decay, std::move(without));
  base.weight_decay(a.weight_decay);
  return std::make_unique<torch::optim::AdamW>(std::move(groups), base);
}

// ---- threads ------------------------------------------------------------------------------------

// Debian's LibTorch calls sgemm through libblas.so.3 (OpenBLAS here); when that OpenBLAS keeps its
// own thread pool, torch::set_num_threads does not reach it. Found at run time, so nothing links it.
void set_blas_threads(int n) {
  using Fn = void (*)(int);
  if (auto fn = reinterpret_cast<Fn>(dlsym(RTLD_DEFAULT, "openblas_set_num_threads"))) fn(n);
}
int blas_threads() {
  using Fn = int (*)();
  auto fn = reinterpret_cast<Fn>(dlsym(RTLD_DEFAULT, "openblas_get_num_threads"));
  return fn ? fn() : -1;
}

double peak_rss_mb() {
  struct rusage ru {};
  getrusage(RUSAGE_SELF, &ru);
  return static_cast<double>(ru.ru_maxrss) * 1024.0 / 1e6;  // ru_maxrss is in KiB on Linux
}

// ---- the two modes ------------------------------------------------------------------------------

int64_t param_count(const Model& m) {
  int64_t n = 0;
  for (const auto& [name, t] : m.params) n += t.numel();
  return n;
}

void run_benchmark(Model& m, const Batch& b, const Args& a) {
  auto opt = make_adamw(m, a);
  const auto params = m.tensors();
  auto step = [&] {
    Tensor loss = loss_of(forward(m, b.ids), b.targets);
    loss.backward();
    if (a.clip > 0) torch::nn::utils::clip_grad_norm_(params, a.clip);
    opt->step();
    opt->zero_grad();
    return loss.item<double>();
  };
  const double loss0 = step();  // warm-up
  std::vector<double> ms;
  double last = loss0;
  for (int64_t i = 0; i < a.time_steps; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    last = step();
    ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  std::vector<double> s = ms;
  std::sort(s.begin(), s.end());
  const std::size_t n = s.size();
  const double median = n % 2 ? s[n / 2] : 0.5 * (s[n / 2 - 1] + s[n / 2]);
  const Config& c = m.cfg;
  const double tokens = static_cast<double>(b.B * b.T);
  // Matmul FLOPs only (the linears, both attention products in full, the head); a step = 3x forward.
  const double fwd = 2.0 * tokens * (static_cast<double>(c.L) * 12.0 * c.C * c.C + static_cast<double>(c.C) * c.V) +
                     static_cast<double>(c.L) * 2.0 * (2.0 * b.B * c.H * b.T * b.T * (c.C / c.H));
  const char* wait = std::getenv("OMP_WAIT_POLICY");
  const double rss = peak_rss_mb();
  std::printf(
      "name=libtorch_gpt2_step.t%d lib=libtorch-%s mkldnn=%d omp_wait=%s threads=%d blas_threads=%d dtype=%s "
      "batch=%lld seqlen=%lld d=%lld heads=%lld layers=%lld vocab=%lld ctx=%lld params=%lld iters=%d median_ms=%.4f "
      "min_ms=%.4f max_ms=%.4f gflops=%.1f tokens=%lld tokens_per_s=%.1f loss0=%.4f loss=%.4f peak_rss_mb=%.1f\n",
      at::get_num_threads(), TORCH_VERSION, int(at::hasMKLDNN() && at::globalContext().userEnabledMkldnn()),
      wait ? wait : "unset", at::get_num_threads(), blas_threads(), a.dtype.c_str(), (long long)b.B, (long long)b.T,
      (long long)c.C, (long long)c.H, (long long)c.L, (long long)c.V, (long long)c.P, (long long)param_count(m),
      static_cast<int>(n), median, s.front(), s.back(), 3 * fwd / (median * 1e6), (long long)(b.B * b.T),
      tokens / (median * 1e-3), loss0, last, rss);
  std::printf("# peak_rss_mb=%.1f (getrusage ru_maxrss, whole run)\n", rss);
  std::fflush(stdout);
}

void run_reference(Model& m, const Batch& b, const Args& a) {
  auto opt = make_adamw(m, a);
  const auto params = m.tensors();
  Tensor logits0, loss0;
  std::vector<std::pair<std::string, Tensor>> grads;
  std::vector<double> losses;
  const int64_t rounds = std::max<int64_t>(a.steps, 1);  // the first forward/backward is the reference
  for (int64_t k = 0; k < rounds; ++k) {
    opt->zero_grad();
    Tensor logits = forward(m, b.ids);
    Tensor loss = loss_of(logits, b.targets);
    loss.backward();
    if (k == 0) {
      logits0 = logits.detach().clone();
      loss0 = loss.detach().clone();
      for (const auto& [name, t] : m.params) {
        if (!t.grad().defined()) fail("no gradient for ", name);
        grads.emplace_back("grad." + name, t.grad().detach().clone());
      }
    }
    if (k < a.steps) {
      losses.push_back(loss.item<double>());
      if (a.clip > 0) torch::nn::utils::clip_grad_norm_(params, a.clip);
      opt->step();
    }
  }
  const torch::Dtype dt = a.dtype == "f64" ? torch::kFloat64 : torch::kFloat32;
  Tensor losses_t = torch::tensor(losses, torch::TensorOptions().dtype(torch::kFloat64)).to(dt);

  const Config& c = m.cfg;
  std::map<std::string, std::string> meta = {
      {"format", "gpt2 reference: logits, loss, grad.<hf name>, losses"},
      {"implementation",
       std::string("libtorch 1.13 (LibTorch ") + TORCH_VERSION + ", tests/gpt2/libtorch_gpt2_reference.cc)"},
      {"vocab_size", std::to_string(c.V)},
      {"n_embd", std::to_string(c.C)},
      {"n_positions", std::to_string(c.P)},
      {"n_layer", std::to_string(c.L)},
      {"n_head", std::to_string(c.H)},
      {"batch", std::to_string(b.B)},
      {"seq_len", std::to_string(b.T)},
      {"layer_norm_eps", "1e-05"},
      {"activation", "gelu_tanh"},
      {"tied_head", "wte.weight"},
      {"optimizer", "torch::optim::AdamW (decay: params of 2+ dims; none: 1-D)"},
      {"steps", std::to_string(a.steps)},
      {"lr", num_str(a.lr)},
      {"beta1", num_str(a.beta1)},
      {"beta2", num_str(a.beta2)},
      {"eps", num_str(a.eps)},
      {"weight_decay", num_str(a.weight_decay)},
      {"clip", num_str(a.clip)},
      {"dtype", a.dtype},
      {"threads", std::to_string(at::get_num_threads())},
      {"weights", a.weights},
      {"batch_file", a.batch},
  };
  std::vector<std::pair<std::string, Tensor>> out = {
      {"logits", logits0}, {"loss", loss0.reshape({})}, {"losses", losses_t}};
  for (auto& g : grads) out.push_back(std::move(g));
  write_safetensors(a.out, out, meta);

  std::printf("libtorch_gpt2_reference: V=%lld C=%lld P=%lld L=%lld heads=%lld B=%lld T=%lld dtype=%s params=%lld\n",
              (long long)c.V, (long long)c.C, (long long)c.P, (long long)c.L, (long long)c.H, (long long)b.B,
              (long long)b.T, a.dtype.c_str(), (long long)param_count(m));
  std::printf("loss=%.10g\nlosses=", loss0.item<double>());
  for (std::size_t i = 0; i < losses.size(); ++i) std::printf("%s%.10g", i ? "," : "", losses[i]);
  std::printf("\nwrote %s\n", a.out.c_str());
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const Args a = parse_args(argc, argv);
    if (a.threads > 0) {
      at::set_num_interop_threads(1);  // must come before any inter-op work
      torch::set_num_threads(static_cast<int>(a.threads));
      set_blas_threads(static_cast<int>(a.threads));
    }
    const torch::Dtype dt = a.dtype == "f64" ? torch::kFloat64 : torch::kFloat32;
    Model m;
    {
      const SafeTensors w = read_safetensors(a.weights);
      m = load_model(w, a.heads, dt);
    }
    const SafeTensors bf = read_safetensors(a.batch);
    const Batch b = load_batch(bf, m.cfg);
    if (a.time_steps > 0) run_benchmark(m, b, a);
    else run_reference(m, b, a);
  } catch (const Fatal& e) {
    std::fprintf(stderr, "libtorch_gpt2_reference: error: %s\n", e.what());
    return 1;
  } catch (const c10::Error& e) {
    std::fprintf(stderr, "libtorch_gpt2_reference: LibTorch error: %s\n", e.what_without_backtrace());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "libtorch_gpt2_reference: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
