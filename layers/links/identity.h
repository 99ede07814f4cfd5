// Identity: a link without parameters that returns its inputs unchanged. In a
// MultiNodeChainList it is the component that only receives: on rank 0 of the model-parallel
// MLP, `add_link(std::make_shared<Identity>(), /*rank_in=*/1, /*rank_out=*/{})` makes the
// logits that come back from rank 1 the output.
#pragma once

#include "layers/link.h"

namespace tandem {

class Identity : public Link {
 public:
  std::string type_name() const override { return "Identity"; }
  Variable forward(const Variable& x) override { return x; }
  Variables forward_many(const Variables& xs) override { return xs; }
};

}  // namespace tandem
