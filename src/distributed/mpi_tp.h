// Tensor parallelism over MPI (`mpirun -np N cachet ... --tp N`): one process per rank, each holding its shard
// of every layer (model/tp_shard.h) and of the KV cache. Rank 0 runs everything else (scheduler, server,
// sampling); its model is a TpLeaderModel that sends each forward batch to the other ranks before running its
// own shard, and the other ranks sit in run_tp_worker, mirroring every batch and every KV block copy into
// their own caches, until rank 0 says stop. All-reduces are MPI_Allgather + a sum in rank order, so every rank
// gets the same bits and the sum does not depend on the message size (batch invariance; docs/decisions.md).
// Built only with MPI (CACHET_WITH_MPI).
#pragma once

#include <memory>
#include <string>

#include "cachet/status.h"
#include "model/model.h"

namespace cachet {

class MpiTp {
 public:
  // Initializes MPI (serialized threads: the engine thread calls it, the main thread finalizes) and checks that
  // mpirun started exactly `size` ranks.
  static Result<std::shared_ptr<MpiTp>> init(int size);
  // The first line of MPI_Get_library_version (callable before MPI_Init): which implementation this binary
  // runs on, so a launcher of the same one can be chosen.
  static std::string library_version();
  ~MpiTp();
  int rank() const { return rank_; }
  int size() const { return size_; }
  // The reducer the model shards call after the attention output and the FFN down.
  std::shared_ptr<TpReducer> reducer();
  // Rank 0: wraps its shard so each forward pass is mirrored on the other ranks.
  std::unique_ptr<Model> lead(std::unique_ptr<Model> shard);
  // Ranks > 0: mirrors rank 0's forward passes until it stops (its TpLeaderModel is destroyed or the process
  // exits); returns the exit code.
  int serve_as_worker(Model& shard);
  // Rank 0: tells the workers to stop (idempotent; also at exit).
  void stop_workers();

 private:
  MpiTp() = default;
  int rank_ = 0, size_ = 1;
  bool stopped_ = false;
};

}  // namespace cachet
