// Parameter initialisers with Chainer's definitions. Each fills a tensor of a given shape;
// fan-in is the product of all axes but the first ([out, in] or [out, in, kh, kw]).
#pragma once

#include <functional>

#include "core/random.h"
#include "core/tensor.h"

namespace tandem {
namespace initializers {

// A function from shape (and dtype) to a freshly initialised tensor.
using Initializer = std::function<Tensor(const Shape& shape, DType dtype)>;

Initializer zero();
Initializer constant(double value);
Initializer normal(double scale = 0.05);                 // N(0, scale^2)
Initializer uniform(double scale = 0.05);                // U(-scale, scale)
Initializer lecun_normal(double scale = 1.0);            // N(0, scale^2 / fan_in): Linear's default
Initializer he_normal(double scale = 1.0);               // N(0, 2 scale^2 / fan_in)
Initializer glorot_uniform(double scale = 1.0);         // U(-s, s), s = scale sqrt(6 / (fan_in + fan_out))

// `base` drawing from a generator of its own, seeded with `seed`, instead of the global one.
// Copies of the result share that generator, so the layers it is given to draw one stream in
// turn, in the order they are built. A model split over processes builds each part with
// initialisers seeded for that part (a layer's index) and starts as the unsplit model, whatever
// else each process drew.
Initializer seeded(std::uint64_t seed, Initializer base);

// The generator initialisers draw from (tandem::global_generator() unless replaced); seeding it
// with manual_seed makes model initialisation reproducible.
Generator& generator();

}  // namespace initializers
}  // namespace tandem
