#include "distributed/mpi_tp.h"

#include <mpi.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <algorithm>
#include <map>
#include <thread>
#include <vector>

#include "kv/kv_block_storage.h"

namespace cachet {

namespace {

MPI_Comm g_comm = MPI_COMM_NULL;

// Every MPI call's result: a failed collective means a rank is gone or the job is broken. Nothing can be
// recovered inside a forward pass, so the process reports and exits non-zero (a supervisor restarts the job;
// mpirun takes the other ranks down). docs/tensor_parallel.md.
void check(int rc, const char* what) {
  if (rc == MPI_SUCCESS) return;
  char msg[MPI_MAX_ERROR_STRING] = {};
  int len = 0;
  MPI_Error_string(rc, msg, &len);
  int rank = -1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  std::fprintf(stderr, "error: tensor parallel: %s failed on rank %d: %s (a rank has died or the job is broken)\n",
               what, rank, msg);
  std::fflush(stderr);
  std::_Exit(3);
}

class AllgatherReducer final : public TpReducer {
 public:
  explicit AllgatherReducer(int size) : size_(size) {}
  void sum(float* x, int64_t n) override {
    if (n > INT32_MAX / size_) {
      std::fprintf(stderr, "error: tensor parallel: an all-reduce of %lld floats is too large\n",
                   static_cast<long long>(n));
      std::_Exit(3);
    }
    buf_.resize(static_cast<size_t>(n) * size_);
    check(MPI_Allgather(x, static_cast<int>(n), MPI_FLOAT, buf_.data(), static_cast<int>(n), MPI_FLOAT, g_comm),
          "all-reduce (MPI_Allgather)");
    // Rank order on every rank: the same bits everywhere, whatever the message size.
    for (int64_t i = 0; i < n; ++i) {
      float s = buf_[i];
      for (int r = 1; r < size_; ++r) s += buf_[r * n + i];
      x[i] = s;
    }
  }

  void gather(const float* mine, int64_t T, const std::vector<int64_t>& widths, float* full,
              bool root_only) override {
    std::vector<int> counts(size_), displs(size_);
    int64_t total = 0, n_full = 0;
    for (int r = 0; r < size_; ++r) {
      if (total + T * widths[r] > INT32_MAX) {
        std::fprintf(stderr, "error: tensor parallel: an all-gather of %lld floats is too large\n",
                     static_cast<long long>(total + T * widths[r]));
        std::_Exit(3);
      }
      counts[r] = static_cast<int>(T * widths[r]);
      displs[r] = static_cast<int>(total);
      total += T * widths[r];
      n_full += widths[r];
    }
    int rank = 0;
    MPI_Comm_rank(g_comm, &rank);
    // One token: rank-order concatenation is already the row. Else gather, then interleave the rows.
    float* dst = T == 1 && full ? full : (buf_.resize(total), buf_.data());
    if (root_only) {
      check(MPI_Gatherv(mine, counts[rank], MPI_FLOAT, dst, counts.data(), displs.data(), MPI_FLOAT, 0, g_comm),
            "gather (MPI_Gatherv)");
      if (rank != 0) return;
    } else {
      check(MPI_Allgatherv(mine, counts[rank], MPI_FLOAT, dst, counts.data(), displs.data(), MPI_FLOAT, g_comm),
            "all-gather (MPI_Allgatherv)");
    }
    if (dst == full) return;
    for (int r = 0, col = 0; r < size_; col += static_cast<int>(widths[r]), ++r)
      for (int64_t t = 0; t < T; ++t)
        std::memcpy(full + t * n_full + col, dst + displs[r] + t * widths[r], widths[r] * sizeof(float));
  }

 private:
  int size_;
  std::vector<float> buf_;
};

enum : int64_t { kOpForward = 1, kOpStop = 2 };

// Rank 0's step message: header {op, length of the body}, then the body.
// Body: T; n_seqs; n_copies; the storage's id, n_blocks, block_size, K type, V type; token ids [T]; positions [T];
// sequence indices [T]; want logits [T]; slots [T]; per sequence: table length, table; per copy: src, dst,
// n_tokens. The batch is plain data: a worker replays it against its own storage of the same id and shape.
void send(const std::vector<int64_t>& body, int64_t op) {
  int64_t head[2] = {op, static_cast<int64_t>(body.size())};
  MPI_Request req;
  check(MPI_Ibcast(head, 2, MPI_INT64_T, 0, g_comm, &req), "step header broadcast");
  check(MPI_Wait(&req, MPI_STATUS_IGNORE), "step header broadcast");
  if (!body.empty())
    check(MPI_Bcast(const_cast<int64_t*>(body.data()), static_cast<int>(body.size()), MPI_INT64_T, 0, g_comm),
          "step broadcast");
}

// A worker waits for the next step without holding a core: it spins for a moment (steps come back to back
// under load), then polls every 200 us.
int64_t receive(std::vector<int64_t>* body) {
  int64_t head[2] = {0, 0};
  MPI_Request req;
  check(MPI_Ibcast(head, 2, MPI_INT64_T, 0, g_comm, &req), "step header broadcast");
  const auto spin_until = std::chrono::steady_clock::now() + std::chrono::milliseconds(2);
  for (int done = 0;;) {
    check(MPI_Test(&req, &done, MPI_STATUS_IGNORE), "step header broadcast");
    if (done) break;
    if (std::chrono::steady_clock::now() > spin_until) std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  body->assign(head[1], 0);
  if (head[1] > 0) check(MPI_Bcast(body->data(), static_cast<int>(head[1]), MPI_INT64_T, 0, g_comm), "step broadcast");
  return head[0];
}

class TpLeaderModel final : public Model {
 public:
  TpLeaderModel(std::unique_ptr<Model> inner, MpiTp& tp) : inner_(std::move(inner)), tp_(tp) {
    set_shared_pool(inner_->shared_pool());
  }
  ~TpLeaderModel() override { tp_.stop_workers(); }

  const ModelConfig& config() const override { return inner_->config(); }
  const std::vector<TensorView>& tensors() const override { return inner_->tensors(); }
  const SpecialTokens& special_tokens() const override { return inner_->special_tokens(); }
  const GgufFile* gguf() const override { return inner_->gguf(); }
  ThreadPool& pool() override { return inner_->pool(); }

  Status forward(const ForwardBatch& b, float* logits, float* hidden = nullptr) override {
    if (!b.kv) return invalid_argument("forward batch: no KV storage");
    if (!b.embd_row.empty() || !b.attn_end.empty())
      return unimplemented("tensor parallelism with images in the prompt (the ranks are sent token ids only)");
    const KvBlockStorage& kv = *b.kv;
    const KvTypes t = kv.types();
    std::vector<int64_t> body{b.n_tokens(),
                              b.n_seqs(),
                              static_cast<int64_t>(b.copies.size()),
                              static_cast<int64_t>(kv.id()),
                              kv.n_blocks(),
                              kv.block_size(),
                              static_cast<int64_t>(t.k),
                              static_cast<int64_t>(t.v)};
    body.insert(body.end(), b.token_ids.begin(), b.token_ids.end());
    body.insert(body.end(), b.positions.begin(), b.positions.end());
    body.insert(body.end(), b.seq_index.begin(), b.seq_index.end());
    body.insert(body.end(), b.want_logits.begin(), b.want_logits.end());
    body.insert(body.end(), b.slots.begin(), b.slots.end());
    for (const std::vector<BlockId>& table : b.block_tables) {
      body.push_back(static_cast<int64_t>(table.size()));
      body.insert(body.end(), table.begin(), table.end());
    }
    for (const KvBlockCopy& c : b.copies) body.insert(body.end(), {c.src, c.dst, c.n_tokens});
    send(body, kOpForward);
    return inner_->forward(b, logits, hidden);  // hidden states: rank 0's own (every rank holds them whole)
  }

 private:
  std::unique_ptr<Model> inner_;
  MpiTp& tp_;
};

[[noreturn]] void desync(const std::string& what) {
  std::fprintf(stderr, "error: tensor parallel: worker out of step with rank 0: %s\n", what.c_str());
  std::fflush(stderr);
  MPI_Abort(MPI_COMM_WORLD, 3);
  std::_Exit(3);
}

}  // namespace

std::string MpiTp::library_version() {
  char v[MPI_MAX_LIBRARY_VERSION_STRING];
  int len = 0;
  if (MPI_Get_library_version(v, &len) != MPI_SUCCESS) return "";
  std::string s(v, static_cast<size_t>(len));
  if (const size_t eol = s.find_first_of("\r\n"); eol != std::string::npos) s.resize(eol);
  while (!s.empty() && (s.back() == ' ' || s.back() == ',' || s.back() == '\0')) s.pop_back();
  return s;
}

Result<std::shared_ptr<MpiTp>> MpiTp::init(int size) {
  int inited = 0;
  MPI_Initialized(&inited);
  if (!inited) {
    // Ranks that wait yield the core (unless the user chose): with busy polling, a rank spinning on a core that
    // something else also needs held each TCP collective for whole scheduler time slices (8 ms measured between
    // two network namespaces, 43 us yielding; docs/tensor_parallel.md).
    setenv("OMPI_MCA_mpi_yield_when_idle", "1", /*overwrite=*/0);
    int provided = 0;
    MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided);
    if (provided < MPI_THREAD_SERIALIZED)
      return unimplemented("tensor parallel: this MPI library does not allow calls from more than one thread");
  }
  std::shared_ptr<MpiTp> tp(new MpiTp());
  MPI_Comm_dup(MPI_COMM_WORLD, &g_comm);
  MPI_Comm_set_errhandler(g_comm, MPI_ERRORS_RETURN);
  MPI_Comm_rank(g_comm, &tp->rank_);
  MPI_Comm_size(g_comm, &tp->size_);
  if (tp->size_ != size)
    return invalid_argument("--tp " + std::to_string(size) + " but mpirun started " + std::to_string(tp->size_) +
                            " process(es): run `mpirun -np " + std::to_string(size) + " cachet ... --tp " +
                            std::to_string(size) + "`");
  return tp;
}

MpiTp::~MpiTp() {
  stop_workers();
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Finalize();
}

std::shared_ptr<TpReducer> MpiTp::reducer() { return std::make_shared<AllgatherReducer>(size_); }

std::unique_ptr<Model> MpiTp::lead(std::unique_ptr<Model> shard) {
  return std::make_unique<TpLeaderModel>(std::move(shard), *this);
}

void MpiTp::stop_workers() {
  if (rank_ != 0 || stopped_ || size_ == 1) return;
  stopped_ = true;
  send({}, kOpStop);
}

int MpiTp::serve_as_worker(Model& m) {
  struct Store {
    std::unique_ptr<KvBlockStorage> s;
    int64_t n_blocks = 0, block_size = 0;
    uint64_t last_use = 0;
  };
  std::map<int64_t, Store> stores;
  constexpr size_t kMaxStores = 8;  // rank 0's finished contiguous caches are dropped least recently used first
  std::vector<int64_t> body;
  const bool trace = std::getenv("CACHET_TP_TRACE") != nullptr;
  for (uint64_t step = 1;; ++step) {
    const int64_t op = receive(&body);
    if (op == kOpStop) return 0;
    if (op != kOpForward) desync("unknown step " + std::to_string(op));
    size_t p = 0;
    auto next = [&]() -> int64_t {
      if (p >= body.size()) desync("short step message");
      return body[p++];
    };
    const int64_t T = next(), n_seqs = next(), n_copies = next();
    const int64_t id = next(), nb = next(), bs = next(), kt = next(), vt = next();
    Store& st = stores[id];
    if (!st.s) {
      st.s = std::make_unique<KvBlockStorage>(m.config(), static_cast<int>(nb), static_cast<int>(bs),
                                              KvTypes(static_cast<KvType>(kt), static_cast<KvType>(vt)));
      st.n_blocks = nb;
      st.block_size = bs;
    } else if (st.n_blocks != nb || st.block_size != bs) {
      desync("storage " + std::to_string(id) + " changed shape");
    }
    st.last_use = step;
    ForwardBatch b;
    b.kv = st.s.get();
    for (auto* v : {&b.token_ids, &b.positions, &b.seq_index})
      for (int64_t i = 0; i < T; ++i) v->push_back(static_cast<int32_t>(next()));
    for (int64_t i = 0; i < T; ++i) b.want_logits.push_back(next() != 0);  // each rank computes its head rows
    for (int64_t i = 0; i < T; ++i) b.slots.push_back(next());
    for (int64_t i = 0; i < n_seqs; ++i) {
      const int64_t n_table = next();
      if (n_table < 0 || n_table > nb) desync("a block table longer than its pool");
      std::vector<BlockId> table(static_cast<size_t>(n_table));
      for (BlockId& blk : table) blk = static_cast<BlockId>(next());
      b.add_sequence(std::move(table));
    }
    for (int64_t i = 0; i < n_copies; ++i) {
      const int64_t src = next(), dst = next(), n = next();
      b.copies.push_back({static_cast<BlockId>(src), static_cast<BlockId>(dst), static_cast<int>(n)});
    }
    // Rank 0 checks the same batch the same way: when it fails there, it fails here too, before any all-reduce.
    const auto t0 = std::chrono::steady_clock::now();
    (void)m.forward(b, nullptr);
    if (trace)  // CACHET_TP_TRACE=1: each mirrored step's size and time on this rank (docs/tensor_parallel.md)
      std::fprintf(stderr, "tp rank %d: step of %lld tokens, %lld sequences, %lld block copies: %.2f ms\n", rank_,
                   static_cast<long long>(T), static_cast<long long>(n_seqs), static_cast<long long>(n_copies),
                   std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    while (stores.size() > kMaxStores) {
      auto oldest = stores.end();
      for (auto it = stores.begin(); it != stores.end(); ++it)
        if (it->second.last_use != step && (oldest == stores.end() || it->second.last_use < oldest->second.last_use))
          oldest = it;
      if (oldest == stores.end()) break;
      stores.erase(oldest);
    }
  }
}

}  // namespace cachet
