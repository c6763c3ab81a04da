#include "engine/step_budget.h"

#include <algorithm>
#include <string>

namespace cachet {

double prompt_token_macs(const Model& model) {
  const ModelConfig& c = model.config();
  double macs = 0.0;
  for (const TensorView& t : model.tensors()) {
    if (t.name == "token_embd.weight" || t.name == "output.weight" || t.ne[1] <= 1) continue;
    double n = static_cast<double>(t.ne[0]) * static_cast<double>(t.n_rows());
    if (t.name.find("_exps.") != std::string::npos && c.n_expert > 0)
      n *= static_cast<double>(c.n_expert_used) / static_cast<double>(c.n_expert);
    macs += n;
  }
  return macs;
}

int step_token_budget(double macs) {
  if (!(macs > 0.0)) return 512;
  const double tokens = std::clamp(kStepMacs / macs, 64.0, 512.0);
  return static_cast<int>(tokens) / 16 * 16;
}

}  // namespace cachet
