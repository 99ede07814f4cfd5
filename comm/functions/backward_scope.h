// The scope of a differentiable communication function's backward: the collectives it calls say
// so in their headers and in the flight recorder (errors then read "allreduce (in backward)").
#pragma once

#include "comm/transport/communicator.h"

namespace tandem {

class CommBackwardScope : public CommLabelScope {
 public:
  CommBackwardScope() : CommLabelScope("in backward") {}
};

}  // namespace tandem
