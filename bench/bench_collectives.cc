// Latency of the collectives tensor parallelism runs per layer, by message size, over whatever transport
// mpirun was given (shared memory, TCP loopback, TCP between network namespaces: bench/tp_bench.py runs all):
// MPI_Allreduce (what reduce mode would use off the shelf), MPI_Allgather + a rank-order sum (reduce mode's
// all-reduce: same bits on every rank), and MPI_Allgatherv of 1/N slices (exact mode's gathers).
// Prints one JSON line per (operation, bytes): median and p90 microseconds over the repetitions.
#include <mpi.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

namespace {

template <typename F>
std::vector<double> time_it(int reps, F&& f) {
  std::vector<double> us;
  for (int i = 0; i < reps + 20; ++i) {
    MPI_Barrier(MPI_COMM_WORLD);
    const double t0 = MPI_Wtime();
    f();
    const double t = (MPI_Wtime() - t0) * 1e6;
    double worst = 0;  // a collective is done when the slowest rank is
    MPI_Allreduce(&t, &worst, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    if (i >= 20) us.push_back(worst);
  }
  std::sort(us.begin(), us.end());
  return us;
}

}  // namespace

int main(int argc, char** argv) {
  setenv("OMPI_MCA_mpi_yield_when_idle", "1", 0);  // as cachet does (src/distributed/mpi_tp.cc says why)
  MPI_Init(&argc, &argv);
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  const int reps = argc > 1 ? std::atoi(argv[1]) : 500;
  const std::string label = argc > 2 ? argv[2] : "";
  for (int bytes : {2048, 4096, 8192, 16384, 32768}) {
    const int n = bytes / 4;
    std::vector<float> x(n, 1.0f + rank), buf(static_cast<size_t>(n) * size), full(n);
    auto report = [&](const char* op, std::vector<double> us) {
      if (rank == 0)
        std::printf("{\"transport\": \"%s\", \"ranks\": %d, \"op\": \"%s\", \"bytes\": %d, \"median_us\": %.2f, "
                    "\"p90_us\": %.2f}\n",
                    label.c_str(), size, op, bytes, us[us.size() / 2], us[us.size() * 9 / 10]);
    };
    report("MPI_Allreduce", time_it(reps, [&] {
             MPI_Allreduce(MPI_IN_PLACE, x.data(), n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
           }));
    report("allgather+sum", time_it(reps, [&] {
             MPI_Allgather(x.data(), n, MPI_FLOAT, buf.data(), n, MPI_FLOAT, MPI_COMM_WORLD);
             for (int i = 0; i < n; ++i) {
               float s = buf[i];
               for (int r = 1; r < size; ++r) s += buf[static_cast<size_t>(r) * n + i];
               x[i] = s * 0.5f;
             }
           }));
    std::vector<int> counts(size), displs(size);
    for (int r = 0, off = 0; r < size; ++r) {
      counts[r] = n / size + (r < n % size ? 1 : 0);
      displs[r] = off;
      off += counts[r];
    }
    report("allgatherv", time_it(reps, [&] {
             MPI_Allgatherv(x.data(), counts[rank], MPI_FLOAT, full.data(), counts.data(), displs.data(), MPI_FLOAT,
                            MPI_COMM_WORLD);
           }));
  }
  std::fflush(stdout);
  MPI_Finalize();
  return 0;
}
