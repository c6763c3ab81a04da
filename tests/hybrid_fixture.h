// A small Qwen3.5-shaped synthetic file (three gated delta nets, then attention; Q8_0) for the hybrid engine
// tests, written once per name and loaded with two threads; with arch "lfm2", an LFM2-shaped one (three short
// convs of kernel 3, then attention); with "granitehybrid", a Granite-4.0-H-shaped one (three Mamba-2 mixers,
// then attention without RoPE); with "nemotron_h", a Nemotron-H-shaped one (Mamba-2, a ReLU^2 FFN, Mamba-2,
// attention without RoPE, each its layer's one block), and with "nemotron_h_moe" its FFN a mixture of 4 experts
// (2 used) beside a shared one ("nemotron_h_moe_latent": the experts 64 wide, between latent projections). `mtp`: the file also carries a multi-token-prediction
// block (SyntheticSpec::mtp_echo with `echo`), and the model loaded is that head (LoadOptions::mtp_head).
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "model/model.h"
#include "model/synthetic.h"
#include "tests/test_util.h"

namespace cachet::testing {

inline std::unique_ptr<Model> hybrid_test_model(uint64_t seed, const std::string& name, bool mtp = false,
                                                bool echo = false, const std::string& arch = "qwen35") {
  SyntheticSpec s;
  s.arch = arch == "nemotron_h_moe_latent" ? "nemotron_h_moe" : arch;
  if (arch == "nemotron_h_moe_latent") s.moe_latent = 64;  // Nemotron 3 Super: experts in a latent width
  if (arch == "lfm2") s.ssm_conv_kernel = 3;
  s.ssm_v_heads = 4;  // Mamba-2: 4 heads (of 64 in granitehybrid, 32 in nemotron_h), B and C in 2 groups
  s.ssm_groups = 2;
  if (s.arch == "nemotron_h_moe") s.n_expert = 4, s.n_expert_used = 2, s.n_ff_shared = 64;

  s.type = DType::kQ8_0;
  s.embd_type = DType::kQ8_0;
  s.n_embd = 128;
  s.n_head = 4;
  s.n_head_kv = 2;
  s.head_dim = 32;
  s.n_layer = 4;  // three gated delta nets, then attention
  s.ssm_head_dim = 32;
  s.seed = seed;
  s.n_mtp = mtp ? 1 : 0;
  s.mtp_echo = echo;
  const std::string path = temp_path(name);
  EXPECT_TRUE(write_synthetic_model(s, path).is_ok());
  LoadOptions lo{2};
  lo.mtp_head = mtp;
  auto m = load_model(path, lo);
  EXPECT_TRUE(m.is_ok()) << m.status().message();
  return std::move(m).value();
}

}  // namespace cachet::testing
