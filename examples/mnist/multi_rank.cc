#include "examples/mnist/multi_rank.h"

#include <cstdio>

#include "comm/multi_node_training/multi_node_snapshot.h"

namespace tandem::examples {

std::string rank_out(const Flags& flags, int rank) {
  return flags.get_string("out") + (rank == 0 ? "" : "/rank" + std::to_string(rank));
}

void resume(Trainer& trainer, Communicator& comm, const Flags& flags, const std::string& program) {
  const std::string resume = flags.get_string("resume");
  if (resume.empty()) return;
  TANDEM_CHECK(resume == "latest", program, ": --resume takes 'latest' (the newest snapshot that every rank "
               "completed), not '", resume, "'");
  trainer.load_snapshot(latest_complete_snapshot(comm, trainer.out()).path);
  if (comm.rank() == 0) std::printf("resumed at iteration %lld\n", static_cast<long long>(trainer.iteration()));
}

void print_final_metrics(const Observation& metrics, int rank) {
  if (rank == 0) std::printf("final test accuracy: %.4f  loss: %.4f\n", metrics.at("accuracy"), metrics.at("loss"));
}

}  // namespace tandem::examples
