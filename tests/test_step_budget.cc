// The step's token budget chosen for a model (engine/step_budget.h): the prompt work counted from the file's
// matrices, experts as routed, and the budget bounded in compute within [64, 512] tokens.
#include <gtest/gtest.h>

#include "engine/step_budget.h"
#include "model/synthetic.h"
#include "tests/test_util.h"

namespace cachet {
namespace {

TEST(StepBudget, CountsEveryMatrixOfAPromptToken) {
  SyntheticSpec s;  // llama, 64 wide, 2 layers, 4 heads of 16 (2 KV heads), FFN 128, tied head
  const std::string path = testing::temp_path("budget.gguf");
  ASSERT_TRUE(write_synthetic_model(s, path).is_ok());
  auto m = load_model(path, {1});
  ASSERT_TRUE(m.is_ok());
  // Per layer q, o 64 x 64; k, v 64 x 32; gate, up, down 64 x 128. Neither the embedding nor the head.
  EXPECT_EQ(prompt_token_macs(**m), 2.0 * (2 * 64 * 64 + 2 * 64 * 32 + 3 * 64 * 128));
  EXPECT_EQ(step_token_budget(**m), 512) << "a small model keeps the widest step";
}

TEST(StepBudget, CountsExpertsAsRouted) {
  double macs[2];
  for (int used : {2, 4}) {
    SyntheticSpec s;
    s.arch = "qwen3moe";
    s.n_expert = 4;
    s.n_expert_used = used;
    const std::string path = testing::temp_path("budget_moe.gguf");
    ASSERT_TRUE(write_synthetic_model(s, path).is_ok());
    auto m = load_model(path, {1});
    ASSERT_TRUE(m.is_ok());
    macs[used / 2 - 1] = prompt_token_macs(**m);
  }
  // Two more of the four experts routed: half the experts' gate, up and down matrices more, in both layers.
  EXPECT_EQ(macs[1] - macs[0], 2 * 0.5 * 4 * 3 * 64 * 128);
}

TEST(StepBudget, BoundsAStepsWorkWithinItsLimits) {
  EXPECT_EQ(step_token_budget(1e8), 512);          // 135M-class: the cap
  EXPECT_EQ(step_token_budget(1.4e9), 128);        // a 2B: 142 tokens, down to a multiple of 16
  EXPECT_EQ(step_token_budget(kStepMacs / 100), 96);
  EXPECT_EQ(step_token_budget(7e9), 64);           // an 8B and beyond: the floor
  EXPECT_EQ(step_token_budget(0.0), 512);
  for (double macs = 1e7; macs < 1e11; macs *= 1.3) {
    const int b = step_token_budget(macs);
    EXPECT_TRUE(b >= 64 && b <= 512 && b % 16 == 0) << macs;
    EXPECT_LE(step_token_budget(macs * 1.3), b) << "more work a token, never a larger step";
  }
}

}  // namespace
}  // namespace cachet
