// Batch assembly (chainer.dataset.concat_examples): stacks a list of examples field by field.
#pragma once

#include <optional>
#include <vector>

#include "core/device.h"
#include "data/dataset.h"

namespace tandem {

// Stacks `batch` field by field: field f of the result is stack({batch[j][f] for all j}),
// with the batch axis first. Every example must have the same number of fields, and each
// field the same dtype, device and (without padding) shape in every example; otherwise the
// error names the example and field that disagree with example 0. An empty batch is an error.
//
// `device`: where the result goes (copied there directly); by default, the examples' device.
// `padding`: for fields whose shapes differ (e.g. sequences of different lengths): each field
// is padded at the end of every axis to the largest extent among the examples, filled with
// this value; the number of axes must still agree.
Example concat_examples(const std::vector<Example>& batch, std::optional<Device> device = std::nullopt,
                        std::optional<double> padding = std::nullopt);

}  // namespace tandem
