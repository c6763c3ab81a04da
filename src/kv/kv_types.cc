#include "kv/kv_types.h"

#include <string>

#include "kernels/kernels.h"
#include "model/config.h"

namespace cachet {

Status kv_types_fit(const ModelConfig& cfg, KvTypes t) {
  if (cfg.v_in_k() && t.k != t.v)
    return invalid_argument(std::string("this model reads V from K's rows (MLA's latent): the KV types must agree, "
                                        "got ") + kv_type_name(t.k) + " and " + kv_type_name(t.v));
  for (int64_t hd : {cfg.head_dim, cfg.head_dim_swa > 0 ? cfg.head_dim_swa : cfg.head_dim}) {
    for (KvType x : {t.k, t.v})
      if (hd % kv_block(x) != 0)
        return invalid_argument(std::string("KV type ") + kv_type_name(x) + " needs a head size that is a multiple of " +
                                std::to_string(kv_block(x)) + "; this model's is " + std::to_string(hd));
    for (KvType x : {t.k, t.v})
      if (kv_block(x) > 1 && hd > kAttnMaxBlockHeadDim)
        return invalid_argument(std::string("KV type ") + kv_type_name(x) + " supports head sizes up to " +
                                std::to_string(kAttnMaxBlockHeadDim) + "; this model's is " + std::to_string(hd));
  }
  return Status::ok();
}

}  // namespace cachet
