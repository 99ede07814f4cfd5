#include "layers/initializers.h"

#include <cmath>
#include <memory>
#include <utility>

#include "core/ops.h"

namespace tandem {
namespace initializers {

namespace {

std::int64_t fan_in(const Shape& shape) {
  TANDEM_CHECK(shape.size() >= 2, "initializer: fan-in needs a shape of at least 2 axes, got ", shape);
  return shape_numel(shape) / shape[0];
}

std::int64_t fan_out(const Shape& shape) { return shape_numel(shape) / shape[1]; }

}  // namespace

Generator& generator() { return global_generator(); }

Initializer zero() {
  return [](const Shape& shape, DType dtype) { return zeros(shape, dtype); };
}

Initializer constant(double value) {
  return [value](const Shape& shape, DType dtype) { return full(shape, value, dtype); };
}

Initializer normal(double scale) {
  return [scale](const Shape& shape, DType dtype) { return randn(shape, generator(), 0, scale, dtype); };
}

Initializer uniform(double scale) {
  return [scale](const Shape& shape, DType dtype) { return rand_uniform(shape, generator(), -scale, scale, dtype); };
}

Initializer lecun_normal(double scale) {
  return [scale](const Shape& shape, DType dtype) {
    return randn(shape, generator(), 0, scale * std::sqrt(1.0 / static_cast<double>(fan_in(shape))), dtype);
  };
}

Initializer he_normal(double scale) {
  return [scale](const Shape& shape, DType dtype) {
    return randn(shape, generator(), 0, scale * std::sqrt(2.0 / static_cast<double>(fan_in(shape))), dtype);
  };
}

Initializer glorot_uniform(double scale) {
  return [scale](const Shape& shape, DType dtype) {
    const double s = scale * std::sqrt(6.0 / static_cast<double>(fan_in(shape) + fan_out(shape)));
    return rand_uniform(shape, generator(), -s, s, dtype);
  };
}

Initializer seeded(std::uint64_t seed, Initializer base) {
  TANDEM_CHECK(base != nullptr, "initializers::seeded: the base initializer is null");
  auto own = std::make_shared<Generator>(seed);
  return [own, base = std::move(base)](const Shape& shape, DType dtype) {
    // The base draws from generator(): lend it this generator's state for the call.
    std::swap(generator(), *own);
    struct Restore {
      Generator& own;
      ~Restore() { std::swap(generator(), own); }
    } restore{*own};
    return base(shape, dtype);
  };
}

}  // namespace initializers
}  // namespace tandem
