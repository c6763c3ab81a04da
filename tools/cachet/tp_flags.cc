// --tp N: tensor parallelism over MPI (src/distributed/mpi_tp.h). Every rank runs the same command line; the model
// load is where the ranks part: rank 0 goes on with the command, the others mirror its forward passes and exit
// when it is done.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <cstdlib>

#include "tools/cachet/common.h"
#if CACHET_WITH_MPI
#include "distributed/mpi_tp.h"
#endif

namespace cachet::cli {

namespace {
int g_tp = 1;
std::string g_tp_mode = "exact";
#if CACHET_WITH_MPI
std::shared_ptr<MpiTp> g_mpi;
#endif
}  // namespace

void add_tp_flag(CLI::App& app) {
  app.add_option("--tp", g_tp,
                 "tensor parallel ranks: run as `mpirun -np N cachet <command> ... --tp N` (each rank holds 1/N of "
                 "every layer and of the KV cache)")
      ->check(CLI::Range(1, 64))
      ->trigger_on_parse();
  app.add_option("--tp-mode", g_tp_mode,
                 "exact: four all-gathers per layer, logits bitwise equal to --tp 1; reduce: two all-reduces per "
                 "layer (Megatron), equal within float rounding")
      ->check(CLI::IsMember({"exact", "reduce"}))
      ->trigger_on_parse();
  app.fallthrough();  // --tp after the subcommand's name
}

int tp_size() { return g_tp; }

Status tp_prepare(LoadOptions* o) {
  if (g_tp <= 1) return Status::ok();
#if CACHET_WITH_MPI
  if (!g_mpi) {
    CACHET_ASSIGN_OR_RETURN(g_mpi, MpiTp::init(g_tp));
  }
  o->tp.rank = g_mpi->rank();
  o->tp.size = g_mpi->size();
  o->tp.exact = g_tp_mode == "exact";
  o->tp.reducer = g_mpi->reducer();
  return Status::ok();
#else
  (void)o;
  return unimplemented("--tp needs a build with MPI (Debian's libopenmpi-dev; scripts/setup.sh installs it)");
#endif
}

Result<std::unique_ptr<Model>> tp_finish_load(std::unique_ptr<Model> shard) {
#if CACHET_WITH_MPI
  if (g_tp <= 1 || !g_mpi) return shard;
  if (g_mpi->rank() == 0) return g_mpi->lead(std::move(shard));
  const int rc = g_mpi->serve_as_worker(*shard);
  shard.reset();
  g_mpi.reset();  // MPI_Finalize
  std::fflush(stdout);
  std::exit(rc);
#else
  return shard;
#endif
}

Result<std::unique_ptr<Model>> load_tp(const std::string& path, const LoadOptions& opts) {
  LoadOptions o = opts;
  CACHET_RETURN_IF_ERROR(tp_prepare(&o));
  CACHET_ASSIGN_OR_RETURN(std::unique_ptr<Model> m, load_model(path, o));
  return tp_finish_load(std::move(m));
}

std::string tp_mpi_library() {
#if CACHET_WITH_MPI
  return MpiTp::library_version();
#else
  return "";
#endif
}

void tp_shutdown() {
#if CACHET_WITH_MPI
  g_mpi.reset();
#endif
}

}  // namespace cachet::cli
