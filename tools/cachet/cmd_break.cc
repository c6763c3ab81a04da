// cachet break: seed 003's two KV-cache corruptions against a clean run, per step agreement and KL, both
// texts side by side, and the curves as CSV and PNG (gnuplot).
#include <CLI/CLI.hpp>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "inspect/break_it.h"
#include "io/gguf.h"
#include "tokenizer/tokenizer.h"
#include "tools/cachet/common.h"

namespace cachet::cli {

void add_break_command(CLI::App& app, int* exit_code) {
  struct Args {
    std::string model, prompt, prompt_ids, out = "break-out", experiment = "both";
    int after = 8, n = 32, threads = 0;
    uint64_t seed = 7;
  };
  auto a = std::make_shared<Args>();
  CLI::App* c = app.add_subcommand("break", "corrupt the KV cache on purpose and measure the damage");
  c->add_option("-m,--model", a->model, "model file (default: SmolLM2-135M-Instruct)");
  c->add_option("-p,--prompt", a->prompt, "prompt text");
  c->add_option("--prompt-ids", a->prompt_ids, "prompt as token ids");
  c->add_option("--after", a->after, "corrupt after this many generated tokens");
  c->add_option("-n,--n-predict", a->n, "steps to measure");
  c->add_option("--experiment", a->experiment, "which corruption")
      ->check(CLI::IsMember({"both", "random-key", "shifted-write", "none"}));
  c->add_option("--seed", a->seed, "seed of the random key values");
  c->add_option("-o,--out", a->out, "directory for break.csv and break.png");
  c->add_option("-t,--threads", a->threads);
  c->callback([a, exit_code] {
    auto lm = load_with_prompt(a->model, a->threads, a->prompt, a->prompt_ids, "1");
    if (!lm.is_ok()) {
      *exit_code = fail(lm.status());
      return;
    }
    Model& model = *lm->model;
    const Tokenizer* tok = lm->tokenizer.get();
    const std::vector<int32_t>& prompt = lm->prompt;
    std::vector<Corruption> kinds;
    if (a->experiment == "both" || a->experiment == "random-key") kinds.push_back(Corruption::kRandomKey);
    if (a->experiment == "both" || a->experiment == "shifted-write") kinds.push_back(Corruption::kShiftedWrite);
    if (a->experiment == "none") kinds.push_back(Corruption::kNone);
    std::vector<BreakReport> reps;
    for (Corruption k : kinds) {
      auto r = run_break_experiment(model, prompt, a->n, a->after, k, a->seed);
      if (!r.is_ok()) {
        *exit_code = fail(r.status());
        return;
      }
      reps.push_back(std::move(r).value());
    }
    auto text = [&](const std::vector<int32_t>& ids) {
      if (!tok) {
        std::string s;
        for (int32_t id : ids) s += std::to_string(id) + " ";
        return s;
      }
      std::string s = tok->decode(ids);
      for (char& ch : s)
        if (ch == '\n') ch = ' ';
      return s;
    };
    std::filesystem::create_directories(a->out);
    const std::string csv = a->out + "/break.csv";
    std::ofstream f(csv);
    f << "step,corrupted";
    for (const auto& r : reps) f << ',' << corruption_name(r.kind) << "_agree," << corruption_name(r.kind) << "_kl";
    f << '\n';
    for (size_t s = 0; s < reps[0].steps.size(); ++s) {
      f << s << ',' << (static_cast<int>(s) >= a->after && s > 0 ? 1 : 0);
      for (const auto& r : reps) f << ',' << (r.steps[s].clean_token == r.steps[s].broken_token ? 1 : 0) << ',' << r.steps[s].kl;
      f << '\n';
    }
    f.close();
    for (const auto& r : reps) {
      std::printf("== %s: %s\n", corruption_name(r.kind),
                  r.kind == Corruption::kRandomKey
                      ? ("the key at position " + std::to_string(r.corrupt_pos) + " overwritten with noise after " +
                         std::to_string(a->after) + " tokens").c_str()
                      : r.kind == Corruption::kShiftedWrite
                            ? ("K and V written one slot early from position " + std::to_string(r.corrupt_pos)).c_str()
                            : "no corruption (control)");
      std::printf("step  corrupted  agree  KL(clean||broken)\n");
      int agree_before = 0, n_before = 0, agree_after = 0, n_after = 0;
      double kl_after = 0;
      for (const auto& st : r.steps) {
        const bool ag = st.clean_token == st.broken_token;
        std::printf("%4d  %-9s  %-5s  %.6f\n", st.step, st.corrupted ? "yes" : "no", ag ? "yes" : "NO", st.kl);
        if (st.step < a->after || st.step == 0) agree_before += ag, ++n_before;
        else agree_after += ag, ++n_after, kl_after += st.kl;
      }
      std::printf("agreement before: %d/%d, after: %d/%d; mean KL after: %.4f nats\n", agree_before, n_before,
                  agree_after, n_after, n_after ? kl_after / n_after : 0.0);
      std::printf("clean:     %s\nbroken:    %s\n\n", text(r.clean_ids).c_str(), text(r.free_run_ids).c_str());
    }
    // The plot, when gnuplot is installed (scripts/setup.sh installs it).
    const std::string png = a->out + "/break.png";
    const std::string gp = a->out + "/break.gp";
    std::ofstream g(gp);
    g << "set terminal pngcairo size 900,600\nset output '" << png << "'\nset datafile separator ','\n"
      << "set multiplot layout 2,1 title 'KV cache corruption after " << a->after << " tokens'\n"
      << "set ylabel 'KL(clean||broken)'\nset key left top\nplot ";
    for (size_t i = 0; i < reps.size(); ++i)
      g << (i ? ", " : "") << "'" << csv << "' using 1:" << 4 + 2 * i << " with linespoints title '"
        << corruption_name(reps[i].kind) << "'";
    g << "\nset ylabel 'agrees with clean'\nset yrange [-0.1:1.1]\nset xlabel 'generated tokens'\nplot ";
    for (size_t i = 0; i < reps.size(); ++i)
      g << (i ? ", " : "") << "'" << csv << "' using 1:" << 3 + 2 * i << " with steps title '"
        << corruption_name(reps[i].kind) << "'";
    g << "\nunset multiplot\n";
    g.close();
    const std::string cmd = "gnuplot '" + gp + "' 2>/dev/null";
    if (std::system(cmd.c_str()) == 0) std::printf("wrote %s and %s\n", csv.c_str(), png.c_str());
    else std::printf("wrote %s (install gnuplot for %s)\n", csv.c_str(), png.c_str());
    *exit_code = 0;
  });
}

}  // namespace cachet::cli
