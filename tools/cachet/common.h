// Helpers shared by the CLI's subcommands.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "cachet/status.h"
#include "model/model.h"

namespace CLI {
class App;
}

namespace cachet::cli {

// -m given, else $CACHET_MODEL, else the default model fetched by scripts/setup.sh.
std::string resolve_model_path(const std::string& flag);
std::string default_model_path();

Result<std::vector<int32_t>> parse_ids(const std::string& text);
Result<std::unique_ptr<Model>> load(const std::string& model_flag, int n_threads, bool precise = false);

// Prints "error: <message>" to stderr and returns the exit code for a failed command.
int fail(const Status& s);

void add_run_command(CLI::App& app, int* exit_code);
void add_info_command(CLI::App& app, int* exit_code);
void add_synth_command(CLI::App& app, int* exit_code);
void add_logits_command(CLI::App& app, int* exit_code);
void add_tokenize_commands(CLI::App& app, int* exit_code);
void add_template_command(CLI::App& app, int* exit_code);
void add_chat_command(CLI::App& app, int* exit_code);
void add_kv_math_command(CLI::App& app, int* exit_code);
void add_trace_command(CLI::App& app, int* exit_code);
void add_break_command(CLI::App& app, int* exit_code);

}  // namespace cachet::cli
