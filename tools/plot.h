// The loss curve as a picture, drawn by gnuplot (Debian: gnuplot-nox), run as
// a program with its script on standard input: no plotting code of our own and
// no library to link. SVG or PNG, chosen by the file's extension.
#pragma once

#include <string>
#include <vector>

namespace capstep::cli {

// "svg" or "png" for a path ending in .svg / .png (any case), else "".
std::string plot_format(const std::string& path);
// The gnuplot program on PATH (or $CAPSTEP_GNUPLOT), or "" when there is none.
std::string find_gnuplot();

struct Curve {
  std::string title;                 // the plot's title (the model line)
  std::vector<long long> steps;
  std::vector<double> losses;
  std::vector<long long> val_steps;  // validation losses, a second curve (may be empty)
  std::vector<double> val_losses;
  std::string unit = "character";    // what the loss is per: character (char), byte, token (a subword tokenizer)
};
// Throws capstep::Error when gnuplot is missing, fails, or writes no file.
void plot_losses(const Curve& c, const std::string& path);

}  // namespace capstep::cli
