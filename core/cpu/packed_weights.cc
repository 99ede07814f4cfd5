#include "core/cpu/packed_weights.h"

#ifdef TANDEM_HAS_DNNL
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/cpu/block_cache.h"
#include "core/cpu/gemm_choice.h"
#include "core/cpu/measured_choice.h"
#include "core/cpu/onednn.h"
#include "core/hash.h"
#endif

#include "core/error.h"
#include "core/kernel_choices.h"
#include "core/tensor.h"

namespace tandem {
namespace cpu {

#ifdef TANDEM_HAS_DNNL

namespace {

using dnnl::memory;

enum class Mode { kAuto, kOff, kAlways };

// TANDEM_PACKED_WEIGHTS, read at every product (a getenv is nothing beside one).
Mode mode() {
  const char* env = std::getenv("TANDEM_PACKED_WEIGHTS");
  if (env == nullptr || *env == 0 || std::strcmp(env, "auto") == 0) return Mode::kAuto;
  if (std::strcmp(env, "off") == 0 || std::strcmp(env, "0") == 0) return Mode::kOff;
  if (std::strcmp(env, "always") == 0) return Mode::kAlways;
  TANDEM_CHECK(false, "TANDEM_PACKED_WEIGHTS=", env, ": expected auto, off (or 0) or always");
  return Mode::kOff;
}

std::int64_t byte_cap() {
  const char* env = std::getenv("TANDEM_PACKED_WEIGHTS_MB");
  if (env == nullptr || *env == 0) return std::int64_t(1024) << 20;
  char* end = nullptr;
  const long long mb = std::strtoll(env, &end, 10);
  TANDEM_CHECK(end != env && *end == 0 && mb >= 0, "TANDEM_PACKED_WEIGHTS_MB=", env,
               ": expected a whole number of megabytes");
  return static_cast<std::int64_t>(mb) << 20;
}

// Products below these sizes are not worth following: packing a small matrix saves little, and a
// product under 32^3 multiply-adds is dominated by its call.
constexpr std::int64_t kMinWork = 32 * 32 * 32;
constexpr std::int64_t kMinRhs = 64 * 64;
// Right-hand sides followed at once: beyond, the least recently used ones without a packed copy
// are forgotten (every product's right-hand side is followed, activations included).
constexpr std::size_t kMaxFollowed = 512;

memory::desc plain_rhs_desc(std::int64_t n, std::int64_t k, bool tb) {
  return memory::desc({k, n}, memory::data_type::f32, tb ? memory::dims{1, k} : memory::dims{n, 1});
}

// A packed right-hand side: the blocked layout one product's primitive asked for, and the copy.
// The copy lies in a block of the CPU block cache, not in memory oneDNN allocates: inference
// after training then packs its weights into what the optimizer's state gave back, instead of
// adding them to the program's peak (the MLP benchmark's peak: see bench/peak_memory.sh).
struct Packed {
  memory::desc desc;
  int layout;  // the desc's number in Cache::layouts
  std::shared_ptr<void> block;
  memory data;  // on `block`
  std::int64_t bytes;
};

std::shared_ptr<void> cached_block(std::size_t bytes) {
  return std::shared_ptr<void>(BlockCache::instance().allocate(bytes),
                               [bytes](void* block) { BlockCache::instance().deallocate(block, bytes); });
}

struct RhsKey {
  const void* data;
  std::int64_t n, k;
  bool tb;
  bool operator==(const RhsKey& o) const { return data == o.data && n == o.n && k == o.k && tb == o.tb; }
};
struct RhsKeyHash {
  std::size_t operator()(const RhsKey& key) const {
    Fnv1a64 h;
    for (std::int64_t v : {static_cast<std::int64_t>(reinterpret_cast<std::uintptr_t>(key.data)), key.n, key.k,
                           std::int64_t(key.tb)}) {
      h.mix(static_cast<std::uint64_t>(v));
    }
    return static_cast<std::size_t>(h.digest());
  }
};

// One right-hand side followed: its storage's version and the products run with it since.
struct Entry {
  std::weak_ptr<Storage> storage;
  std::uint64_t version = 0;
  std::int64_t uses = 0;
  std::shared_ptr<const Packed> packed;
  bool unpackable = false;  // oneDNN keeps this shape plain: a copy would gain nothing
  std::uint64_t last_used = 0;
};

// A product's primitive on a packed right-hand side: the shape, the layout, the thread count.
struct ProductKey {
  std::int64_t m, n, k;
  bool ta, tb, accumulate;
  int layout, threads;
  bool operator==(const ProductKey& o) const {
    return m == o.m && n == o.n && k == o.k && ta == o.ta && tb == o.tb && accumulate == o.accumulate &&
           layout == o.layout && threads == o.threads;
  }
};
struct ProductKeyHash {
  std::size_t operator()(const ProductKey& key) const {
    Fnv1a64 h;
    for (std::int64_t v : {key.m, key.n, key.k,
                           std::int64_t(key.ta) | std::int64_t(key.tb) << 1 | std::int64_t(key.accumulate) << 2,
                           std::int64_t(key.layout), std::int64_t(key.threads)}) {
      h.mix(static_cast<std::uint64_t>(v));
    }
    return static_cast<std::size_t>(h.digest());
  }
};
struct Product {
  bool made = false;  // false: no oneDNN kernel takes this layout for this product
  dnnl::matmul primitive;
  memory::desc scratchpad;
};

struct Cache {
  std::mutex mutex;
  std::unordered_map<RhsKey, Entry, RhsKeyHash> entries;
  // Per right-hand side shape (n, k, tb): the products the last finished version served.
  std::unordered_map<RhsKey, std::int64_t, RhsKeyHash> served;
  std::vector<memory::desc> layouts;
  std::unordered_map<ProductKey, Product, ProductKeyHash> products;
  std::int64_t bytes = 0, packs = 0, packed_products = 0;
  std::uint64_t tick = 0;

  void finish(const Entry& e, const RhsKey& key) {
    served[RhsKey{nullptr, key.n, key.k, key.tb}] = e.uses;
    if (e.packed) bytes -= e.packed->bytes;
  }

  int layout_number(const memory::desc& desc) {
    for (std::size_t i = 0; i < layouts.size(); ++i)
      if (layouts[i] == desc) return static_cast<int>(i);
    layouts.push_back(desc);
    return static_cast<int>(layouts.size()) - 1;
  }

  // Forgets the right-hand sides whose storage is gone, then, over the bound, the least recently
  // used ones without a copy.
  void sweep() {
    for (auto it = entries.begin(); it != entries.end();) {
      if (it->second.storage.expired()) {
        finish(it->second, it->first);
        it = entries.erase(it);
      } else {
        ++it;
      }
    }
    while (entries.size() > kMaxFollowed) {
      auto oldest = entries.end();
      for (auto it = entries.begin(); it != entries.end(); ++it) {
        if (!it->second.packed && (oldest == entries.end() || it->second.last_used < oldest->second.last_used))
          oldest = it;
      }
      if (oldest == entries.end()) break;
      finish(oldest->second, oldest->first);
      entries.erase(oldest);
    }
  }

  // Room for `more` bytes under the cap, dropping the least recently used copies; false when the
  // copy alone is over it.
  bool make_room(std::int64_t more, std::int64_t cap) {
    if (more > cap) return false;
    while (bytes + more > cap) {
      Entry* oldest = nullptr;
      for (auto& kv : entries) {
        if (kv.second.packed && (oldest == nullptr || kv.second.last_used < oldest->last_used)) oldest = &kv.second;
      }
      if (oldest == nullptr) return false;
      bytes -= oldest->packed->bytes;
      oldest->packed.reset();
    }
    return true;
  }

  // The primitive for a product on a right-hand side packed in `layout` (made at first use).
  const Product& product(const ProductKey& key, const memory::desc& packed_desc) {
    auto it = products.find(key);
    if (it != products.end()) return it->second;
    if (products.size() >= 1024) products.clear();  // shapes that vary every step: bounded
    Product p;
    const memory::desc a_md({key.m, key.k}, memory::data_type::f32,
                            key.ta ? memory::dims{1, key.m} : memory::dims{key.k, 1});
    const memory::desc c_md({key.m, key.n}, memory::data_type::f32, memory::dims{key.n, 1});
    try {
      const auto pd = onednn_matmul_pd(a_md, packed_desc, c_md, onednn_matmul_attr(key.accumulate));
      p.primitive = dnnl::matmul(pd);
      p.scratchpad = pd.scratchpad_desc();
      p.made = true;
    } catch (const dnnl::error&) {
      // No kernel for this layout at this shape (another product's layout): run it plain.
    }
    return products.emplace(key, std::move(p)).first->second;
  }
};

Cache& cache() {
  static Cache* c = new Cache;  // never destroyed: products may run during exit
  return *c;
}

// The layout oneDNN's matmul wants for this product's right-hand side ("any"), or none when it
// keeps the plain one.
bool blocked_layout(std::int64_t m, std::int64_t n, std::int64_t k, bool ta, bool tb, bool accumulate,
                    memory::desc* out) {
  const memory::desc a_md({m, k}, memory::data_type::f32, ta ? memory::dims{1, m} : memory::dims{k, 1});
  const memory::desc b_any({k, n}, memory::data_type::f32, memory::format_tag::any);
  const memory::desc c_md({m, n}, memory::data_type::f32, memory::dims{n, 1});
  const auto pd = onednn_matmul_pd(a_md, b_any, c_md, onednn_matmul_attr(accumulate));
  *out = pd.weights_desc();
  return !(*out == plain_rhs_desc(n, k, tb));
}

// b copied into `desc` at `into` (an oneDNN reorder on this thread's stream, its scratchpad this
// thread's).
memory pack(const float* b, std::int64_t n, std::int64_t k, bool tb, const memory::desc& desc, void* into) {
  auto& engine = onednn_engine();
  memory from(plain_rhs_desc(n, k, tb), engine, const_cast<float*>(b)), to(desc, engine, into);
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  const dnnl::reorder::primitive_desc pd(engine, from.get_desc(), engine, desc, attr);
  auto& stream = onednn_stream();
  dnnl::reorder(pd).execute(stream, {{DNNL_ARG_FROM, from},
                                     {DNNL_ARG_TO, to},
                                     {DNNL_ARG_SCRATCHPAD, onednn_scratchpad(pd.scratchpad_desc())}});
  stream.wait();
  return to;
}

void run_packed(const Product& p, const float* a, const memory::desc& a_md, const memory& b, float* c,
                const memory::desc& c_md) {
  auto& engine = onednn_engine();
  memory am(a_md, engine, const_cast<float*>(a)), cm(c_md, engine, c);
  auto& stream = onednn_stream();
  p.primitive.execute(stream, {{DNNL_ARG_SRC, am},
                               {DNNL_ARG_WEIGHTS, b},
                               {DNNL_ARG_DST, cm},
                               {DNNL_ARG_SCRATCHPAD, onednn_scratchpad(p.scratchpad)}});
  stream.wait();
}

constexpr std::int64_t kNever = 1 << 30;
// The break-even without timing (TANDEM_KERNEL_TUNING=fixed): a copy made for a weight that serves
// at least this many products of one version (inference batches, a pipeline's microbatches).
constexpr std::int64_t kFixedBreakEven = 4;

// How many products a packed copy must serve to pay for its packing, for this product's class:
// measured on a product of this shape (synthetic data) as packing + n packed products against
// n plain ones; kNever when the packed product is not faster.
std::int64_t break_even(std::int64_t m, std::int64_t n, std::int64_t k, bool ta, bool tb, PlainProduct plain) {
  const std::string key = gemm_class_key<float>("gemm_packed", m, n, k, ta, tb);
  const std::string word = measured_word(
      key,
      [](const std::string& w) {
        char* end = nullptr;
        return w == "never" || (!w.empty() && std::strtoll(w.c_str(), &end, 10) > 0 && *end == 0);
      },
      [&] {
        std::vector<float> a(static_cast<std::size_t>(m * k)), b(static_cast<std::size_t>(k * n)),
            c(static_cast<std::size_t>(m * n));
        for (std::size_t i = 0; i < a.size(); ++i) a[i] = static_cast<float>(static_cast<int>(i % 7) - 3);
        for (std::size_t i = 0; i < b.size(); ++i) b[i] = static_cast<float>(static_cast<int>(i % 5) - 2);
        memory::desc desc;
        const bool blocked = blocked_layout(m, n, k, ta, tb, false, &desc);
        std::vector<double> seconds = {0, 1e9, 1e9};
        if (blocked) {
          const std::shared_ptr<void> block = cached_block(desc.get_size());
          const memory packed = pack(b.data(), n, k, tb, desc, block.get());
          const memory::desc a_md({m, k}, memory::data_type::f32, ta ? memory::dims{1, m} : memory::dims{k, 1});
          const memory::desc c_md({m, n}, memory::data_type::f32, memory::dims{n, 1});
          const Product p = [&] {
            Cache& cc = cache();
            std::lock_guard<std::mutex> lock(cc.mutex);
            return cc.product(ProductKey{m, n, k, ta, tb, false, cc.layout_number(desc), onednn_threads()}, desc);
          }();
          if (p.made) {
            const std::int64_t work = m * n * k;
            const int rounds = work >= (std::int64_t(1) << 26) ? 3 : 5;
            const int repeats = static_cast<int>(std::clamp<std::int64_t>((std::int64_t(1) << 21) / work, 1, 64));
            seconds = time_interleaved(
                3,
                [&](std::size_t i) {
                  if (i == 0) plain(a.data(), b.data(), c.data(), m, n, k, ta, tb, false);
                  else if (i == 1) run_packed(p, a.data(), a_md, packed, c.data(), c_md);
                  else pack(b.data(), n, k, tb, desc, block.get());
                },
                rounds, repeats);
          }
        }
        std::int64_t uses = kNever;
        if (seconds[1] < seconds[0]) {
          uses = std::max<std::int64_t>(1, static_cast<std::int64_t>(std::ceil(seconds[2] / (seconds[0] - seconds[1]))));
        }
        char figures[160];
        const double flops = 2.0 * double(m) * double(n) * double(k);
        if (blocked) {
          std::snprintf(figures, sizeof(figures), "plain=%.1f packed=%.1f packing=%.2f_products (%lldx%lldx%lld)",
                        flops / seconds[0] / 1e9, flops / seconds[1] / 1e9, seconds[2] / seconds[0],
                        static_cast<long long>(m), static_cast<long long>(n), static_cast<long long>(k));
        } else {
          std::snprintf(figures, sizeof(figures), "plain_layout_kept (%lldx%lldx%lld)", static_cast<long long>(m),
                        static_cast<long long>(n), static_cast<long long>(k));
        }
        return std::make_pair(uses >= kNever || uses > 100000 ? std::string("never") : std::to_string(uses),
                              std::string(figures));
      },
      std::to_string(kFixedBreakEven));
  if (word.empty() || word == "never") return kNever;  // "": a worker of a region being measured
  return std::strtoll(word.c_str(), nullptr, 10);
}

}  // namespace

bool gemm_packed_rhs(const float* a, const Tensor& b, float* c, std::int64_t m, std::int64_t n, std::int64_t k,
                     bool ta, bool tb, bool accumulate, PlainProduct plain) {
  if (m * n * k < kMinWork || n * k < kMinRhs || gemm_backend_forced()) return false;
  const Mode how = mode();
  if (how == Mode::kOff) return false;
  const std::shared_ptr<Storage>& storage = b.storage();
  if (how == Mode::kAuto && !storage->weight()) return false;  // not followed at all
  const RhsKey key{b.raw_data(), n, k, tb};
  const int threads = onednn_threads();
  const memory::desc a_md({m, k}, memory::data_type::f32, ta ? memory::dims{1, m} : memory::dims{k, 1});
  const memory::desc c_md({m, n}, memory::data_type::f32, memory::dims{n, 1});
  Cache& cc = cache();

  // 1. Count this product. The first of a version runs plain; a later one runs on the copy when
  // there is one for a layout this product's kernel takes.
  std::int64_t uses, served_before;
  std::shared_ptr<const Packed> packed;
  Product run;
  {
    std::lock_guard<std::mutex> lock(cc.mutex);
    auto it = cc.entries.find(key);
    if (it != cc.entries.end() && (it->second.storage.lock() != storage || it->second.version != storage->version())) {
      cc.finish(it->second, it->first);  // a new version, or another storage at the same address
      cc.entries.erase(it);
      it = cc.entries.end();
    }
    if (it == cc.entries.end()) {
      cc.sweep();
      Entry e;
      e.storage = storage;
      e.version = storage->version();
      e.uses = 1;
      e.last_used = ++cc.tick;
      cc.entries.emplace(key, std::move(e));
      return false;
    }
    Entry& e = it->second;
    uses = ++e.uses;
    e.last_used = ++cc.tick;
    if (e.unpackable) return false;
    if (e.packed) {
      run = cc.product(ProductKey{m, n, k, ta, tb, accumulate, e.packed->layout, threads}, e.packed->desc);
      if (run.made) {
        packed = e.packed;
        ++cc.packed_products;
      }
    }
    const auto s = cc.served.find(RhsKey{nullptr, n, k, tb});
    served_before = s == cc.served.end() ? 0 : s->second;
  }
  if (packed) {  // outside the lock: the primitive and the copy are shared handles, read only
    run_packed(run, a, a_md, packed->data, c, c_md);
    return true;
  }

  // 2. Whether a copy pays: the products this version can still expect (this one included)
  // against the measured break-even, measured outside the lock (measuring runs products and
  // takes the choices' lock, which a thread measuring something else may hold while it runs a
  // product here).
  const std::int64_t expected = std::max(served_before - uses + 1, uses);
  if (how == Mode::kAuto && expected < break_even(m, n, k, ta, tb, plain)) return false;

  // 3. Pack, then run on the copy.
  memory::desc desc;
  const bool blocked = blocked_layout(m, n, k, ta, tb, accumulate, &desc);
  {
    std::lock_guard<std::mutex> lock(cc.mutex);
    auto it = cc.entries.find(key);
    if (it == cc.entries.end() || it->second.version != storage->version()) return false;  // swept meanwhile
    Entry& e = it->second;
    if (!blocked) {
      e.unpackable = true;
      return false;
    }
    const auto bytes = static_cast<std::int64_t>(desc.get_size());
    if (e.packed) cc.bytes -= e.packed->bytes, e.packed.reset();
    if (!cc.make_room(bytes, byte_cap())) return false;
    const int layout = cc.layout_number(desc);
    run = cc.product(ProductKey{m, n, k, ta, tb, accumulate, layout, threads}, desc);
    if (!run.made) return false;
    auto made = std::make_shared<Packed>();
    made->desc = desc;
    made->layout = layout;
    made->block = cached_block(static_cast<std::size_t>(bytes));
    made->data = pack(static_cast<const float*>(key.data), n, k, tb, desc, made->block.get());
    made->bytes = bytes;
    e.packed = packed = made;
    cc.bytes += bytes;
    ++cc.packs;
    ++cc.packed_products;
  }
  run_packed(run, a, a_md, packed->data, c, c_md);
  return true;
}

bool packs_rhs(std::int64_t m, std::int64_t n, std::int64_t k, bool ta, bool tb, bool accumulate) {
  memory::desc desc;
  return blocked_layout(m, n, k, ta, tb, accumulate, &desc);
}

PackedWeightStats packed_weight_stats() {
  Cache& cc = cache();
  std::lock_guard<std::mutex> lock(cc.mutex);
  PackedWeightStats s;
  s.packs = cc.packs;
  s.packed_products = cc.packed_products;
  s.bytes = cc.bytes;
  s.followed = static_cast<std::int64_t>(cc.entries.size());
  return s;
}

void clear_packed_weights() {
  Cache& cc = cache();
  std::lock_guard<std::mutex> lock(cc.mutex);
  cc.entries.clear();
  cc.served.clear();
  cc.bytes = cc.packs = cc.packed_products = 0;
}

#endif

}  // namespace cpu

void forget_kernel_history() { cpu::clear_packed_weights(); }

namespace cpu {

#ifndef TANDEM_HAS_DNNL  // no oneDNN in this build: every product runs plain

bool gemm_packed_rhs(const float*, const Tensor&, float*, std::int64_t, std::int64_t, std::int64_t, bool, bool, bool,
                     PlainProduct) {
  return false;
}
bool packs_rhs(std::int64_t, std::int64_t, std::int64_t, bool, bool, bool) { return false; }
PackedWeightStats packed_weight_stats() { return {}; }
void clear_packed_weights() {}

#endif

}  // namespace cpu
}  // namespace tandem
