// A pipeline stage that holds a copy of a parameter another stage holds too: GPT-2's last stage
// keeps the token embedding for its head (the first stage looks ids up in it), and
// comm/model_parallel/tied_parameters.h keeps the copies equal. A sharded checkpoint
// (comm/checkpoint/training_checkpoint.h) names such a parameter without its stage, saves the
// owner's copy only (with its optimizer state), and loads every copy from it.
#pragma once

#include <map>
#include <string>

namespace tandem {
namespace pipeline {

class TiedStage {
 public:
  virtual ~TiedStage() = default;
  // The tied parameters by path in the stage ("wte/W"), each with whether this stage's copy is
  // the one a checkpoint saves (exactly one stage owns each).
  virtual std::map<std::string, bool> tied_parameters() const = 0;
};

}  // namespace pipeline
}  // namespace tandem
