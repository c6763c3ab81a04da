#include "model/tp_shard.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "model/decoder.h"

namespace cachet {

namespace {

// [begin, end) of part `rank` of n items dealt to `size` parts, the first n % size parts one larger.
std::pair<int64_t, int64_t> deal(int64_t n, int rank, int size) {
  const int64_t base = n / size, extra = n % size;
  const int64_t begin = rank * base + std::min<int64_t>(rank, extra);
  return {begin, begin + base + (rank < extra ? 1 : 0)};
}

// Output rows [r0, r1) of a [n_in, n_out] matrix: a view.
TensorView rows(const TensorView& t, int64_t r0, int64_t r1) {
  TensorView v = t;
  v.data = t.data + r0 * t.row_bytes;
  v.ne[1] = r1 - r0;
  return v;
}

// Elements [e0, e1) of a 1-D f32 vector (a bias): a view.
TensorView elems(const TensorView& t, int64_t e0, int64_t e1) {
  TensorView v = t;
  if (!t.data) return v;
  v.data = t.data + e0 * sizeof(float);
  v.ne[0] = e1 - e0;
  v.row_bytes = (e1 - e0) * sizeof(float);
  return v;
}

// Input columns [c0, c1) of a [n_in, n_out] matrix, copied whole blocks at a time.
Status columns(TensorView* t, int64_t c0, int64_t c1, const char* why, std::vector<AlignedBuffer<uint8_t>>* owned) {
  const DTypeTraits& tr = traits(t->type);
  for (int64_t c : {c0, c1})
    if (c % tr.block_size != 0)
      return invalid_argument("tensor parallel: " + t->name + " (" + tr.name + ", blocks of " +
                              std::to_string(tr.block_size) + " columns) cannot be cut at column " +
                              std::to_string(c) + " (" + why + "); choose a --tp that cuts on block boundaries");
  const size_t off = c0 / tr.block_size * tr.block_bytes;
  const size_t nb = (c1 - c0) / tr.block_size * tr.block_bytes;
  const int64_t n_rows = t->n_rows();
  AlignedBuffer<uint8_t> buf(nb * n_rows);
  for (int64_t r = 0; r < n_rows; ++r) std::memcpy(buf.data() + r * nb, t->row(r) + off, nb);
  t->data = buf.data();
  t->ne[0] = c1 - c0;
  t->row_bytes = nb;
  owned->push_back(std::move(buf));
  return Status::ok();
}

int64_t ff_unit(const ModelConfig& cfg, const DecoderWeights& w) {
  int64_t unit = 32;
  for (const auto& L : w.layers) {
    if (cfg.n_expert > 0) {
      for (const TensorView& t : L.down_exps) unit = std::max(unit, traits(t.type).block_size);
    } else {
      unit = std::max(unit, traits(L.w_down.type).block_size);
    }
  }
  return unit;
}

}  // namespace

Result<TpSplit> tp_split(const ModelConfig& cfg, int rank, int size, int64_t unit) {
  if (size < 1 || rank < 0 || rank >= size)
    return invalid_argument("tensor parallel: rank " + std::to_string(rank) + " of " + std::to_string(size));
  if (cfg.n_head_kv < size)
    return invalid_argument("tensor parallel: --tp " + std::to_string(size) + " but the model has " +
                            std::to_string(cfg.n_head_kv) +
                            " KV heads; shards are cut by KV head, so at most that many ranks");
  if (cfg.n_ff % unit != 0 || cfg.n_ff / unit < size)
    return invalid_argument("tensor parallel: the FFN width " + std::to_string(cfg.n_ff) + " does not split into " +
                            std::to_string(size) + " parts of whole " + std::to_string(unit) + "-column blocks");
  TpSplit s;
  std::tie(s.kv_head0, s.kv_head1) = deal(cfg.n_head_kv, rank, size);
  auto [u0, u1] = deal(cfg.n_ff / unit, rank, size);
  s.ff0 = u0 * unit;
  s.ff1 = u1 * unit;
  // Output rows in whole 16-row groups (the packed layout's) where the width allows.
  const int64_t d_unit = cfg.n_embd % 16 == 0 && cfg.n_embd / 16 >= size ? 16 : 1;
  auto [r0, r1] = deal(cfg.n_embd / d_unit, rank, size);
  s.d0 = r0 * d_unit;
  s.d1 = r1 * d_unit;
  const int64_t v_unit = cfg.n_vocab / 16 >= size ? 16 : 1;
  auto [w0, w1] = deal(cfg.n_vocab / v_unit, rank, size);
  s.v0 = w0 * v_unit;
  s.v1 = rank == size - 1 ? cfg.n_vocab : w1 * v_unit;  // the last rank also takes the vocabulary's tail
  return s;
}

Status shard_decoder_weights(const TpOptions& tp, ModelConfig* cfg, DecoderWeights* w,
                             std::vector<AlignedBuffer<uint8_t>>* owned, TpLayout* layout) {
  if (tp.size <= 1) return Status::ok();
  if (cfg->expert_biases)  // each rank's partial down projection would carry the whole bias
    return unimplemented("tensor parallel: experts with biases (gpt-oss) are not split across ranks yet");
  if (cfg->ffn_act == "relu2")  // its FFNs have no gate to cut alongside up
    return unimplemented("tensor parallel: ungated FFNs (Nemotron-H) are not split across ranks yet");
  const bool exact = tp.exact && cfg->n_expert == 0;
  const int64_t unit = exact ? 32 : ff_unit(*cfg, *w);  // exact: down is cut by rows, any 32 columns will do
  std::vector<TpSplit> all;
  for (int r = 0; r < tp.size; ++r) {
    CACHET_ASSIGN_OR_RETURN(TpSplit sr, tp_split(*cfg, r, tp.size, unit));
    all.push_back(sr);
  }
  const TpSplit s = all[tp.rank];
  const int64_t hd = cfg->head_dim, rep = cfg->n_head / cfg->n_head_kv;
  layout->exact = exact;
  layout->q_full = cfg->q_dim();
  layout->ff_full = cfg->n_ff;
  for (const TpSplit& x : all) {
    layout->q_widths.push_back((x.kv_head1 - x.kv_head0) * rep * hd);
    layout->ff_widths.push_back(x.ff1 - x.ff0);
    layout->d_widths.push_back(x.d1 - x.d0);
    layout->v_widths.push_back(x.v1 - x.v0);
  }
  w->output = rows(w->output, s.v0, s.v1);
  const int64_t q0 = s.kv_head0 * rep * hd, q1 = s.kv_head1 * rep * hd;  // query columns
  const int64_t k0 = s.kv_head0 * hd, k1 = s.kv_head1 * hd;              // key / value columns
  for (auto& L : w->layers) {
    L.wq = rows(L.wq, q0, q1);
    L.wk = rows(L.wk, k0, k1);
    L.wv = rows(L.wv, k0, k1);
    L.bq = elems(L.bq, q0, q1);
    L.bk = elems(L.bk, k0, k1);
    L.bv = elems(L.bv, k0, k1);
    L.sinks = elems(L.sinks, q0 / hd, q1 / hd);  // one per query head
    if (exact) {
      L.wo = rows(L.wo, s.d0, s.d1);
    } else {
      CACHET_RETURN_IF_ERROR(columns(&L.wo, q0, q1, "the first query column of a rank's KV heads", owned));
    }
    if (cfg->n_expert > 0) {
      for (size_t e = 0; e < L.gate_exps.size(); ++e) {
        L.gate_exps[e] = rows(L.gate_exps[e], s.ff0, s.ff1);
        L.up_exps[e] = rows(L.up_exps[e], s.ff0, s.ff1);
        CACHET_RETURN_IF_ERROR(columns(&L.down_exps[e], s.ff0, s.ff1, "a rank's first FFN column", owned));
      }
    } else {
      L.w_gate = rows(L.w_gate, s.ff0, s.ff1);
      L.w_up = rows(L.w_up, s.ff0, s.ff1);
      if (exact) {
        L.w_down = rows(L.w_down, s.d0, s.d1);
      } else {
        CACHET_RETURN_IF_ERROR(columns(&L.w_down, s.ff0, s.ff1, "a rank's first FFN column", owned));
      }
    }
  }
  cfg->n_head = (s.kv_head1 - s.kv_head0) * rep;
  cfg->n_head_kv = s.kv_head1 - s.kv_head0;
  cfg->n_ff = s.ff1 - s.ff0;
  return Status::ok();
}

}  // namespace cachet
