#include "plot.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <sstream>

#include "capstep/ir.h"

extern char** environ;

namespace capstep::cli {

std::string plot_format(const std::string& path) {
  std::string lower = path;
  std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char c) { return std::tolower(c); });
  for (const char* ext : {".svg", ".png"})
    if (lower.size() > 4 && lower.compare(lower.size() - 4, 4, ext) == 0) return ext + 1;
  return "";
}

std::string find_gnuplot() {
  if (const char* e = std::getenv("CAPSTEP_GNUPLOT"); e && *e) return access(e, X_OK) == 0 ? e : "";
  const char* path = std::getenv("PATH");
  std::stringstream dirs(path ? path : "/usr/bin:/bin");
  for (std::string d; std::getline(dirs, d, ':');) {
    std::string f = (d.empty() ? "." : d) + "/gnuplot";
    if (access(f.c_str(), X_OK) == 0) return f;
  }
  return "";
}

namespace {

// A gnuplot string literal in single quotes ('' is a quote inside).
std::string quoted(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("''") : std::string(1, c);
  return q + "'";
}

std::string script(const Curve& c, const std::string& path, const std::string& fmt) {
  std::ostringstream s;
  s.precision(9);
  if (fmt == "svg") s << "set terminal svg size 900,500 dynamic enhanced font 'sans,13' background '#ffffff'\n";
  else s << "set terminal pngcairo size 900,500 enhanced font 'sans,11' background '#ffffff'\n";
  s << "set output " << quoted(path) << "\n"
    << "set title " << quoted(c.title) << " noenhanced\n"
    << "set xlabel 'step'\nset ylabel 'loss (nats per " << c.unit << ")'\n"
    << "set grid\nset key top right\nset border 3\nset tics nomirror\n";
  // The loss of each step is noisy (one small batch); an exponential moving
  // average beside it shows the trend.
  s << "$loss << EOD\n";
  double ema = c.losses.empty() ? 0 : c.losses[0];
  for (size_t i = 0; i < c.losses.size(); ++i) {
    ema = 0.95 * ema + 0.05 * c.losses[i];
    s << c.steps[i] << ' ' << c.losses[i] << ' ' << ema << '\n';
  }
  s << "EOD\n";
  if (!c.val_losses.empty()) {
    s << "$val << EOD\n";
    for (size_t i = 0; i < c.val_losses.size(); ++i) s << c.val_steps[i] << ' ' << c.val_losses[i] << '\n';
    s << "EOD\n";
  }
  s << "plot $loss using 1:2 with lines lw 1 lc rgb '#a6c8e8' title 'loss per step', \\\n"
    << "     $loss using 1:3 with lines lw 2 lc rgb '#1f5fa8' title 'moving average (0.95)'";
  if (!c.val_losses.empty())
    s << ", \\\n     $val using 1:2 with linespoints lw 2 pt 7 ps 0.6 lc rgb '#d9541e' title 'validation loss'";
  s << "\nunset output\n";
  return s.str();
}

}  // namespace

void plot_losses(const Curve& c, const std::string& path) {
  const std::string fmt = plot_format(path);
  if (fmt.empty()) throw Error("plot file '" + path + "' must end in .svg or .png");
  if (c.losses.empty()) throw Error("no loss to plot");
  const std::string gp = find_gnuplot();
  if (gp.empty()) throw Error("--plot draws with gnuplot, which is not on PATH (Debian: apt-get install gnuplot-nox)");
  const std::string text = script(c, path, fmt);

  // A gnuplot that dies early must not take us down with SIGPIPE.
  signal(SIGPIPE, SIG_IGN);
  int fds[2];
  if (pipe(fds) != 0) throw Error(std::string("cannot start gnuplot: pipe: ") + std::strerror(errno));
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, fds[0], 0);
  posix_spawn_file_actions_addclose(&fa, fds[1]);
  // gnuplot draws on its standard output when it cannot open the file: that
  // picture must not land in ours. Its messages (standard error) stay.
  posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
  char* argv[] = {const_cast<char*>(gp.c_str()), nullptr};
  pid_t pid = 0;
  const int rc = posix_spawn(&pid, gp.c_str(), &fa, nullptr, argv, environ);
  posix_spawn_file_actions_destroy(&fa);
  close(fds[0]);
  if (rc != 0) {
    close(fds[1]);
    throw Error("cannot start gnuplot '" + gp + "': " + std::strerror(rc));
  }
  size_t off = 0;
  while (off < text.size()) {
    const ssize_t n = write(fds[1], text.data() + off, text.size() - off);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;   // gnuplot died; its exit status says why
    off += static_cast<size_t>(n);
  }
  close(fds[1]);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
    throw Error("gnuplot failed drawing '" + path + "' (exit status " + std::to_string(WEXITSTATUS(status)) + ")");
  struct stat st {};
  if (stat(path.c_str(), &st) != 0 || st.st_size == 0) throw Error("gnuplot wrote no picture to '" + path + "'");
}

}  // namespace capstep::cli
