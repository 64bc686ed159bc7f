#pragma once
// The `k3` subcommands. Each add_*_command declares its options on a CLI11 subcommand of
// `root` (one declaration per option: the parser and `--help` come from the same table) and
// sets a callback that runs the command and stores its exit code in `rc`. Commands throw
// std::exception for user errors; main prints "k3 CMD: message" and exits 2.

namespace CLI {
class App;
}

namespace k3::app {

void add_serve_command(CLI::App& root, int& rc);
void add_run_command(CLI::App& root, int& rc);
void add_make_model_command(CLI::App& root, int& rc);
void add_sim_command(CLI::App& root, int& rc);
void add_shard_command(CLI::App& root, int& rc);
void add_tokenize_command(CLI::App& root, int& rc);
void add_bench_command(CLI::App& root, int& rc);
void add_version_command(CLI::App& root, int& rc);
void add_render_command(CLI::App& root, int& rc);

} // namespace k3::app
