// k3 — the single k3serve binary. `k3 --help` lists the subcommands, `k3 help CMD` or
// `k3 CMD --help` shows one command's options; every option is declared once (CLI11) and the
// help text is generated from the same table the parser uses.
#include <cstdio>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "apps/k3/commands.hpp"
#include "kernels/common/blas_core.hpp"
#include "config/cli_util.hpp"
#include "config/server_config.hpp"
#include "config/version.hpp"

namespace {

// `k3 help CMD [SUB]` is `k3 CMD [SUB] --help`; `k3 help` is `k3 --help`.
std::vector<std::string> rewrite_help(std::vector<std::string> args) {
  if (!args.empty() && args[0] == "help") {
    args.erase(args.begin());
    args.push_back("--help");
  }
  return args;
}

// The chain of subcommands that were selected, for error messages ("k3 bench serve").
std::string selected_name(const CLI::App& root) {
  std::string name = "k3";
  const CLI::App* at = &root;
  for (;;) {
    const auto subs = at->get_subcommands();
    if (subs.empty()) break;
    at = subs.front();
    name += " " + at->get_name();
  }
  return name;
}

} // namespace

int main(int argc, char** argv) {
  k3::ensure_blas_core(argv); // may re-execute with OPENBLAS_CORETYPE set (kernels/common/blas_core.hpp)
  CLI::App root{"k3serve: serving runtime for Kimi K3 and Kimi Linear (OpenAI-compatible server, offline runs, "
                "cluster simulator, benchmarks)",
                "k3"};
  k3::conf::prepare_app(root);
  root.set_version_flag("--version", std::string("k3serve ") + k3::version_string);
  root.require_subcommand(1, 1);
  root.footer("Run `k3 help COMMAND` or `k3 COMMAND --help` for a command's options.");
  int rc = 0;
  k3::app::add_serve_command(root, rc);
  k3::app::add_run_command(root, rc);
  k3::app::add_make_model_command(root, rc);
  k3::app::add_sim_command(root, rc);
  k3::app::add_bench_command(root, rc);
  k3::app::add_tokenize_command(root, rc);
  k3::app::add_render_command(root, rc);
  k3::app::add_shard_command(root, rc);
  k3::app::add_version_command(root, rc);

  std::vector<std::string> args = rewrite_help(std::vector<std::string>(argv + 1, argv + argc));
  try {
    // `k3 serve`: SGLang's -tp/-pp and --config FILE are expanded against serve's own table.
    if (!args.empty() && args[0] == "serve") {
      std::vector<std::string> rest(args.begin() + 1, args.end());
      rest = k3::conf::expand_server_args(*root.get_subcommand("serve"), rest);
      rest.insert(rest.begin(), "serve");
      args = std::move(rest);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "k3 serve: %s\n", e.what());
    return 2;
  }
  if (args.empty()) {
    std::fputs(root.help().c_str(), stderr);
    return 2;
  }
  std::vector<std::string> reversed(args.rbegin(), args.rend());
  try {
    root.parse(reversed);
  } catch (const CLI::CallForHelp& e) {
    return root.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return root.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return root.exit(e);
  } catch (const CLI::ParseError& e) {
    std::fprintf(stderr, "%s: %s\n", selected_name(root).c_str(), k3::conf::describe_parse_error(e, selected_name(root)).c_str());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: %s\n", selected_name(root).c_str(), e.what());
    return 2;
  }
  return rc;
}
