// consolidate_snapshot OUT.npz RANK0.npz RANK1.npz ...: every rank's snapshot of a sharded
// data-parallel run (zero >= 1), in rank order, into the snapshot one process would have
// written (sharded_snapshot.h).
//
//   bazel run //tools:consolidate_snapshot -- $PWD/one.npz
//       $PWD/result/snapshot_iter_600.npz $PWD/result/rank1/snapshot_iter_600.npz   (one line)
#include <cstdio>
#include <exception>

#include "comm/data_parallel/sharded_snapshot.h"

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: consolidate_snapshot OUT.npz RANK0.npz [RANK1.npz ...]\n");
    return 2;
  }
  try {
    std::vector<tandem::NamedTensors> per_rank;
    for (int i = 2; i < argc; ++i) per_rank.push_back(tandem::read_npz(argv[i]));
    tandem::write_npz(argv[1], tandem::consolidate_sharded_snapshots(per_rank));
    std::printf("consolidate_snapshot: %d ranks' snapshots -> %s\n", argc - 2, argv[1]);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "consolidate_snapshot: %s\n", e.what());
    return 1;
  }
  return 0;
}
