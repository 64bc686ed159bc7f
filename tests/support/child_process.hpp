#pragma once
// A child process for end-to-end tests: spawned with posix_spawn, its first stdout line read
// back (servers print their bound address there), SIGTERM + waitpid on destruction.

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

extern char** environ;

namespace k3::test {

class child_process {
public:
  /// merge_stderr: the child's stderr goes to the same pipe (for reading its error messages).
  explicit child_process(std::vector<std::string> args, bool merge_stderr = false) {
    int fds[2];
    if (::pipe(fds) != 0) return;
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, fds[1], 1);
    if (merge_stderr) posix_spawn_file_actions_adddup2(&fa, fds[1], 2);
    posix_spawn_file_actions_addclose(&fa, fds[0]);
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    if (posix_spawn(&pid_, argv[0], &fa, nullptr, argv.data(), environ) != 0) pid_ = -1;
    posix_spawn_file_actions_destroy(&fa);
    ::close(fds[1]);
    out_ = ::fdopen(fds[0], "r");
    char buf[1024] = {};
    if (pid_ > 0 && std::fgets(buf, sizeof buf, out_)) line_ = buf;
  }
  ~child_process() {
    if (pid_ > 0 && !reaped_) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
    if (out_) std::fclose(out_);
  }
  child_process(const child_process&) = delete;
  child_process& operator=(const child_process&) = delete;

  [[nodiscard]] const std::string& line() const { return line_; }
  /// The first line plus further output up to a line containing `needle`, or to EOF.
  [[nodiscard]] std::string read_until(const std::string& needle) {
    std::string all = line_;
    char buf[1024];
    while (all.find(needle) == std::string::npos && out_ && std::fgets(buf, sizeof buf, out_)) all += buf;
    return all;
  }
  /// The port after "HOST:" in the first line, 0 if absent.
  [[nodiscard]] int port_after(const std::string& host) const {
    const auto at = line_.find(host + ":");
    return at == std::string::npos ? 0 : std::atoi(line_.c_str() + at + host.size() + 1);
  }
  void signal(int sig) const { ::kill(pid_, sig); }
  /// Waits for exit; returns the exit code (128 + signal if killed).
  int wait() {
    int st = 0;
    ::waitpid(pid_, &st, 0);
    reaped_ = true;
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
  }

private:
  pid_t pid_ = -1;
  FILE* out_ = nullptr;
  std::string line_;
  bool reaped_ = false;
};

} // namespace k3::test
