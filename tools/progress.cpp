#include "progress.h"

#include <cmath>

namespace capstep::cli {

std::string clock_text(double s) {
  if (!std::isfinite(s) || s < 0) s = 0;
  char buf[32];
  if (s < 60) {
    std::snprintf(buf, sizeof buf, "%.1fs", s);
    return buf;
  }
  const long t = std::lround(s);
  if (t >= 3600) std::snprintf(buf, sizeof buf, "%ld:%02ld:%02ld", t / 3600, t / 60 % 60, t % 60);
  else std::snprintf(buf, sizeof buf, "%ld:%02ld", t / 60, t % 60);
  return buf;
}

std::string rate_text(double r) {
  char buf[32];
  if (r >= 1e6) std::snprintf(buf, sizeof buf, "%.2fM", r / 1e6);
  else if (r >= 1e3) std::snprintf(buf, sizeof buf, "%.1fk", r / 1e3);
  else std::snprintf(buf, sizeof buf, "%.0f", r);
  return buf;
}

namespace {

double seconds_left(const train::StepInfo& s) {
  const double done = static_cast<double>(s.step - s.first_step + 1);
  return s.elapsed_s / done * static_cast<double>(s.last_step - s.step);
}

// 1, 2, 5, 10, 20, 50, ... : the smallest that gives at most ~20 lines.
int64_t auto_every(int64_t steps) {
  for (int64_t base = 1;; base *= 10)
    for (int64_t k : {1, 2, 5})
      if (steps / (k * base) <= 20) return k * base;
}

}  // namespace

Progress::Progress(std::FILE* out, bool terminal, int64_t every) : out_(out), terminal_(terminal), every_(every) {}

void Progress::step(const train::StepInfo& s) {
  last_ = s;
  if (terminal_) {
    // At most ten redraws a second: a terminal is slower than a small model.
    auto now = std::chrono::steady_clock::now();
    if (s.step == s.last_step || now - last_draw_ >= std::chrono::milliseconds(100)) {
      draw(s);
      last_draw_ = now;
    }
    return;
  }
  const int64_t every = every_ > 0 ? every_ : auto_every(s.last_step - s.first_step + 1);
  if (s.step == s.first_step || s.step == s.last_step || s.step % every == 0) {
    std::fprintf(out_, "step %lld/%lld  loss %.4f  %s tokens/s  elapsed %s  left %s\n", static_cast<long long>(s.step),
                 static_cast<long long>(s.last_step), s.loss, rate_text(s.tokens_per_s).c_str(),
                 clock_text(s.elapsed_s).c_str(), clock_text(seconds_left(s)).c_str());
    std::fflush(out_);
  }
}

void Progress::draw(const train::StepInfo& s) {
  constexpr int kWidth = 24;
  const double frac = static_cast<double>(s.step - s.first_step + 1) / static_cast<double>(s.last_step - s.first_step + 1);
  const int filled = static_cast<int>(frac * kWidth);
  std::string bar(static_cast<size_t>(filled), '#');
  bar.append(static_cast<size_t>(kWidth - filled), '-');
  // \r and "erase to end of line": the bar replaces itself in place.
  std::fprintf(out_, "\r\033[Kstep %lld/%lld [%s] loss %.4f | %s tok/s | %s left", static_cast<long long>(s.step),
               static_cast<long long>(s.last_step), bar.c_str(), s.loss, rate_text(s.tokens_per_s).c_str(),
               clock_text(seconds_left(s)).c_str());
  std::fflush(out_);
  bar_shown_ = true;
}

void Progress::message(const std::string& m) {
  if (terminal_ && bar_shown_) {
    std::fprintf(out_, "\r\033[K%s\n", m.c_str());
    draw(last_);
  } else {
    std::fprintf(out_, "%s\n", m.c_str());
  }
  std::fflush(out_);
}

void Progress::finish() {
  if (terminal_ && bar_shown_) {
    draw(last_);
    std::fprintf(out_, "\n");
    bar_shown_ = false;
  }
  std::fflush(out_);
}

}  // namespace capstep::cli
