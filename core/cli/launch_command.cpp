#include "cli/launch_command.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstring>
#include <stdexcept>

extern char** environ;

namespace baton::cli {
namespace {

volatile std::sig_atomic_t g_forward_signal = 0;

void on_signal(int sig) { g_forward_signal = sig; }

std::string self_executable() {
  char buffer[4096];
  ssize_t n = ::readlink("/proc/self/exe", buffer, sizeof buffer - 1);
  if (n <= 0) throw std::runtime_error(std::string("baton launch: cannot find its own executable: ") +
                                       std::strerror(errno));
  return std::string(buffer, static_cast<std::size_t>(n));
}

// A port nobody listens on now; rank 0's TCPStore binds it a moment later.
int free_port() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) throw std::runtime_error(std::string("baton launch: socket: ") + std::strerror(errno));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof addr;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    ::close(fd);
    throw std::runtime_error(std::string("baton launch: cannot find a free port: ") + std::strerror(errno));
  }
  ::close(fd);
  return ntohs(addr.sin_port);
}

void write_all(int fd, const std::string& text) {
  const char* p = text.data();
  std::size_t left = text.size();
  while (left > 0) {
    ssize_t n = ::write(fd, p, left);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    p += n;
    left -= static_cast<std::size_t>(n);
  }
}

// One output stream of one rank: complete lines go out prefixed; a last unterminated line at EOF too.
struct Stream {
  int fd = -1;
  int target = STDOUT_FILENO;
  std::string prefix;
  std::string pending;

  void consume(const char* data, std::size_t n) {
    pending.append(data, n);
    std::size_t start = 0, nl;
    std::string out;
    while ((nl = pending.find('\n', start)) != std::string::npos) {
      out += prefix + pending.substr(start, nl - start + 1);
      start = nl + 1;
    }
    pending.erase(0, start);
    write_all(target, out);
  }
  void close_stream() {
    if (!pending.empty()) write_all(target, prefix + pending + "\n");
    pending.clear();
    ::close(fd);
    fd = -1;
  }
};

struct Rank {
  pid_t pid = -1;
  bool running = false;
  int status = 0;
};

std::string describe_exit(int status) {
  if (WIFEXITED(status)) return "exited with status " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status))
    return "was killed by signal " + std::to_string(WTERMSIG(status)) + " (" + strsignal(WTERMSIG(status)) + ")";
  return "ended with wait status " + std::to_string(status);
}

bool failed(int status) { return !WIFEXITED(status) || WEXITSTATUS(status) != 0; }

std::vector<std::string> rank_environment(const LaunchOptions& options, int local_rank, int port) {
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    std::string entry = *e;
    std::string name = entry.substr(0, entry.find('='));
    // What a launcher sets is this launcher's to set; torchrun's agent-store flag would make rank 0 a client of a
    // store nobody hosts.
    if (name == "RANK" || name == "WORLD_SIZE" || name == "LOCAL_RANK" || name == "LOCAL_WORLD_SIZE" ||
        name == "GROUP_RANK" || name == "MASTER_ADDR" || name == "MASTER_PORT" ||
        name.rfind("TORCHELASTIC_", 0) == 0)
      continue;
    env.push_back(entry);
  }
  env.push_back("RANK=" + std::to_string(options.node_rank * options.nproc + local_rank));
  env.push_back("WORLD_SIZE=" + std::to_string(options.nnodes * options.nproc));
  env.push_back("LOCAL_RANK=" + std::to_string(local_rank));
  env.push_back("LOCAL_WORLD_SIZE=" + std::to_string(options.nproc));
  env.push_back("GROUP_RANK=" + std::to_string(options.node_rank));
  env.push_back("MASTER_ADDR=" + (options.master_addr.empty() ? std::string("127.0.0.1") : options.master_addr));
  env.push_back("MASTER_PORT=" + std::to_string(port));
  return env;
}

std::vector<char*> c_strings(std::vector<std::string>& items) {
  std::vector<char*> out;
  for (auto& s : items) out.push_back(s.data());
  out.push_back(nullptr);
  return out;
}

// Starts one rank with its stdout and stderr on pipes, in its own process group so a Ctrl-C at the terminal
// reaches it once, through the launcher, rather than twice.
pid_t spawn(const std::string& exe, std::vector<std::string> argv, std::vector<std::string> env, Stream& out,
            Stream& err) {
  int out_pipe[2], err_pipe[2];
  if (::pipe2(out_pipe, O_CLOEXEC) != 0 || ::pipe2(err_pipe, O_CLOEXEC) != 0)
    throw std::runtime_error(std::string("baton launch: pipe: ") + std::strerror(errno));
  std::vector<char*> c_argv = c_strings(argv);
  std::vector<char*> c_env = c_strings(env);
  const pid_t launcher = ::getpid();
  pid_t pid = ::fork();
  if (pid < 0) throw std::runtime_error(std::string("baton launch: fork: ") + std::strerror(errno));
  if (pid == 0) {
    ::setpgid(0, 0);
    // A rank outlives no launcher: if this one is killed outright, its ranks go too, and the other machines' ranks
    // fail on the lost peer instead of training beside an orphan nobody reads. (Checked again after the call, in
    // case the launcher died before it.)
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != launcher) ::_exit(1);
    ::dup2(out_pipe[1], STDOUT_FILENO);
    ::dup2(err_pipe[1], STDERR_FILENO);
    ::signal(SIGINT, SIG_DFL);
    ::signal(SIGTERM, SIG_DFL);
    ::execve(exe.c_str(), c_argv.data(), c_env.data());
    const char* message = "baton launch: exec failed\n";
    if (::write(STDERR_FILENO, message, std::strlen(message)) < 0) ::_exit(127);
    ::_exit(127);
  }
  ::close(out_pipe[1]);
  ::close(err_pipe[1]);
  out.fd = out_pipe[0];
  err.fd = err_pipe[0];
  return pid;
}

class Launcher {
 public:
  explicit Launcher(const LaunchOptions& options) : options_(options) {}

  int run() {
    const std::string exe = self_executable();
    const int port = options_.master_port != 0 ? options_.master_port : free_port();
    std::vector<std::string> argv{exe};
    argv.insert(argv.end(), options_.args.begin(), options_.args.end());
    ranks_.resize(options_.nproc);
    streams_.resize(2 * options_.nproc);
    std::signal(SIGINT, on_signal);
    std::signal(SIGTERM, on_signal);
    for (int r = 0; r < options_.nproc; ++r) {
      Stream& out = streams_[2 * r];
      Stream& err = streams_[2 * r + 1];
      out.prefix = err.prefix = "[rank " + std::to_string(global_rank(r)) + "] ";
      err.target = STDERR_FILENO;
      ranks_[r].pid = spawn(exe, argv, rank_environment(options_, r, port), out, err);
      ranks_[r].running = true;
      write_all(STDERR_FILENO, "baton launch: rank " + std::to_string(global_rank(r)) + " is pid " +
                                   std::to_string(ranks_[r].pid) + "\n");
    }
    while (any_running() || any_open()) {
      forward_signal();
      pump_output();
      reap();
      enforce_grace();
    }
    return finish();
  }

 private:
  int global_rank(std::size_t local) const { return options_.node_rank * options_.nproc + static_cast<int>(local); }

  bool any_running() const {
    for (const auto& r : ranks_)
      if (r.running) return true;
    return false;
  }
  bool any_open() const {
    for (const auto& s : streams_)
      if (s.fd >= 0) return true;
    return false;
  }

  void signal_all(int sig) {
    for (const auto& r : ranks_)
      if (r.running) ::kill(r.pid, sig);
  }

  void forward_signal() {
    int sig = g_forward_signal;
    if (sig == 0) return;
    g_forward_signal = 0;
    interrupted_ = true;
    signal_all(sig);
  }

  void pump_output() {
    std::vector<pollfd> fds;
    std::vector<Stream*> owners;
    for (auto& s : streams_)
      if (s.fd >= 0) {
        fds.push_back(pollfd{s.fd, POLLIN, 0});
        owners.push_back(&s);
      }
    if (fds.empty()) {
      ::usleep(50 * 1000);
      return;
    }
    int n = ::poll(fds.data(), fds.size(), 100);
    if (n <= 0) return;  // timeout, or a signal to forward
    char buffer[65536];
    for (std::size_t i = 0; i < fds.size(); ++i) {
      if (fds[i].revents == 0) continue;
      ssize_t got = ::read(fds[i].fd, buffer, sizeof buffer);
      if (got > 0)
        owners[i]->consume(buffer, static_cast<std::size_t>(got));
      else if (got == 0 || errno != EINTR)
        owners[i]->close_stream();
    }
  }

  void reap() {
    for (std::size_t r = 0; r < ranks_.size(); ++r) {
      Rank& rank = ranks_[r];
      if (!rank.running) continue;
      int status = 0;
      if (::waitpid(rank.pid, &status, WNOHANG) != rank.pid) continue;
      rank.running = false;
      rank.status = status;
      // 130 is a rank's clean stop after a signal (forwarded by us, or sent to that rank alone): the run is
      // interrupted, not failed. The other ranks stop after the same batch and may still be saving and exporting,
      // so they are waited for, not ended (a SIGTERM would be a second signal, which makes a rank exit at once).
      if (WIFEXITED(status) && WEXITSTATUS(status) == 130) {
        interrupted_ = true;
        continue;
      }
      if (failed(status) && failure_.empty()) {
        failure_ = "rank " + std::to_string(global_rank(r)) + " " + describe_exit(status);
        if (any_running()) {
          write_all(STDERR_FILENO, "baton launch: " + failure_ + "; ending the other ranks\n");
          signal_all(SIGTERM);
          kill_deadline_ = std::chrono::steady_clock::now() +
                           std::chrono::milliseconds(static_cast<long>(options_.grace_seconds * 1000));
        }
      }
    }
  }

  void enforce_grace() {
    if (failure_.empty() || killed_ || !any_running() || std::chrono::steady_clock::now() < kill_deadline_) return;
    killed_ = true;
    write_all(STDERR_FILENO, "baton launch: ranks still running after the grace period: SIGKILL\n");
    signal_all(SIGKILL);
  }

  int finish() {
    if (interrupted_) return 130;
    if (failure_.empty()) return 0;
    write_all(STDERR_FILENO, "baton launch: failed: " + failure_ + "\n");
    return 1;
  }

  const LaunchOptions& options_;
  std::vector<Rank> ranks_;
  std::vector<Stream> streams_;
  std::string failure_;
  bool interrupted_ = false;
  bool killed_ = false;
  std::chrono::steady_clock::time_point kill_deadline_;
};

}  // namespace

std::string launch_usage_error(const LaunchOptions& options) {
  if (options.nproc < 1) return "baton launch: --nproc must be >= 1";
  if (options.nnodes < 1) return "baton launch: --nnodes must be >= 1";
  if (options.node_rank < 0 || options.node_rank >= options.nnodes)
    return "baton launch: --node-rank " + std::to_string(options.node_rank) + " is not in [0, " +
           std::to_string(options.nnodes - 1) + "] (--nnodes " + std::to_string(options.nnodes) + ")";
  // Every machine must name the same rendezvous: a free port picked here would be known to this machine alone.
  if (options.nnodes > 1 && (options.master_addr.empty() || options.master_port == 0))
    return "baton launch: --nnodes " + std::to_string(options.nnodes) +
           " needs --master-addr and --master-port: node 0's address and a free port on it, the same on every node";
  if (options.master_port < 0 || options.master_port > 65535)
    return "baton launch: --master-port " + std::to_string(options.master_port) + " is not in [1, 65535]";
  if (options.args.empty()) return "baton launch: no baton command to run (e.g. train cfg.toml)";
  return "";
}

int launch(const LaunchOptions& options) {
  if (std::string problem = launch_usage_error(options); !problem.empty()) throw std::runtime_error(problem);
  return Launcher(options).run();
}

}  // namespace baton::cli
