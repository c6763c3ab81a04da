#include "inspect/kv_math.h"

#include <cstdio>

#include "base/checked_math.h"

namespace cachet {

std::string kv_math(const KvShape& s, int64_t context, int64_t batch, int64_t block_size, int64_t budget_bytes,
                    int64_t weight_bytes, KvMath* out) {
  if (s.n_layer <= 0 || s.n_head_kv <= 0 || s.head_dim <= 0) return "layers, KV heads and head dim must be positive";
  if (context <= 0 || batch <= 0 || block_size <= 0) return "context, batch and block size must be positive";
  if (s.n_layer_b < 0 || (s.n_layer_b > 0 && (s.n_head_kv_b <= 0 || s.head_dim_b <= 0)))
    return "the second kind of layer needs positive KV heads and head dim";
  for (int64_t hd : {s.head_dim, s.n_layer_b > 0 ? s.head_dim_b : s.head_dim})
    for (KvType t : {s.k, s.v})
      if (hd % kv_block(t) != 0)
        return std::string("a head of ") + std::to_string(hd) + " values is not a whole number of " +
               kv_type_name(t) + " blocks";
  // K and V: per layer, per KV head, one row of head_dim values each, in their own types (K only when V is read
  // from K's rows).
  auto row = [&](int64_t hd) { return kv_row_bytes(s.k, hd) + (s.v_in_k ? 0 : kv_row_bytes(s.v, hd)); };
  uint64_t per_token = static_cast<uint64_t>(s.n_layer) * s.n_head_kv * row(s.head_dim);
  if (s.n_layer_b > 0) per_token += static_cast<uint64_t>(s.n_layer_b) * s.n_head_kv_b * row(s.head_dim_b);
  auto mul = [](uint64_t a, uint64_t b) { return checked_mul(a, b).value_or(UINT64_MAX); };
  out->bytes_per_token = static_cast<int64_t>(per_token);
  if (s.state_bytes_per_sequence < 0) return "state bytes must not be negative";
  const uint64_t state = static_cast<uint64_t>(s.state_bytes_per_sequence);
  out->bytes_per_sequence = static_cast<int64_t>(mul(per_token, context) + state);
  out->bytes_per_batch = static_cast<int64_t>(mul(out->bytes_per_sequence, batch));
  const int64_t blocks = (context + block_size - 1) / block_size;
  out->paged_bytes_per_sequence = static_cast<int64_t>(mul(per_token, blocks * block_size) + state);
  out->paged_waste_bytes = out->paged_bytes_per_sequence - out->bytes_per_sequence;
  out->max_sequences = out->max_sequences_paged = -1;
  if (budget_bytes > 0) {
    const int64_t free = budget_bytes - weight_bytes;
    out->max_sequences = free > 0 ? free / out->bytes_per_sequence : 0;
    out->max_sequences_paged = free > 0 ? free / out->paged_bytes_per_sequence : 0;
  }
  return {};
}

std::string format_bytes(int64_t bytes) {
  static const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(bytes);
  int u = 0;
  while (v >= 1024.0 && u < 4) {
    v /= 1024.0;
    ++u;
  }
  char buf[96];
  if (u == 0) std::snprintf(buf, sizeof buf, "%lld B", static_cast<long long>(bytes));
  else std::snprintf(buf, sizeof buf, "%.2f %s (%lld bytes)", v, kUnits[u], static_cast<long long>(bytes));
  return buf;
}

}  // namespace cachet
