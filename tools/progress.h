// Training progress for `capstep train`: on a terminal one bar redrawn in
// place (step, loss, tokens/s, time left); otherwise plain log lines every few
// steps, so that a log file or a pipe reads cleanly.
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>

#include "capstep/train.h"

namespace capstep::cli {

class Progress {
 public:
  // every: plain lines every N steps (0: about twenty over the run).
  Progress(std::FILE* out, bool terminal, int64_t every);
  void step(const train::StepInfo& s);
  void message(const std::string& m);   // a line of its own, above the bar
  void finish();                        // ends the bar's line

 private:
  void draw(const train::StepInfo& s);
  std::FILE* out_;
  bool terminal_;
  int64_t every_;
  bool bar_shown_ = false;
  train::StepInfo last_;
  std::chrono::steady_clock::time_point last_draw_{};
};

// "1:05:03", "4:07", "9.4s"
std::string clock_text(double seconds);
// "21.3k"
std::string rate_text(double per_s);

}  // namespace capstep::cli
