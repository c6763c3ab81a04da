// Tracing the forward pass: the model reports each op of its first layer (the others repeat it) with the
// real shapes of this batch, for `cachet trace`. Off (a null tracer) costs one branch per op.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace cachet {

struct TraceOp {
  std::string name;                 // "rms_norm", "matmul", "rope", "kv_store", "attention", ...
  std::string weight;               // the weight tensor, for matmuls and norms
  std::string weight_type;
  std::vector<int64_t> weight_shape;  // GGUF order: [n_in, n_out]
  std::vector<int64_t> in_shape;      // activations, outermost first
  std::vector<int64_t> out_shape;
  std::string note;
};

class Tracer {
 public:
  virtual ~Tracer() = default;
  // Called once per forward pass before any op.
  virtual void begin_forward(int n_tokens, int first_pos, int n_layer) = 0;
  virtual void op(TraceOp op) = 0;
};

}  // namespace cachet
