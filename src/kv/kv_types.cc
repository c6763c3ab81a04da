#include "kv/kv_types.h"

#include <string>

#include "kernels/kernels.h"
#include "model/config.h"

namespace cachet {

Status kv_types_fit(const ModelConfig& cfg, KvTypes t) {
  for (KvType x : {t.k, t.v})
    if (cfg.head_dim % kv_block(x) != 0)
      return invalid_argument(std::string("KV type ") + kv_type_name(x) + " needs a head size that is a multiple of " +
                              std::to_string(kv_block(x)) + "; this model's is " + std::to_string(cfg.head_dim));
  for (KvType x : {t.k, t.v})
    if (kv_block(x) > 1 && cfg.head_dim > kAttnMaxBlockHeadDim)
      return invalid_argument(std::string("KV type ") + kv_type_name(x) + " supports head sizes up to " +
                              std::to_string(kAttnMaxBlockHeadDim) + "; this model's is " +
                              std::to_string(cfg.head_dim));
  return Status::ok();
}

}  // namespace cachet
