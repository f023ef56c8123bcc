// `capstep show` and `capstep export`: the captured programs of the model, as
// capstep's own text or as StableHLO.
#include <iostream>

#include "backend/plan/kernel_plan.h"
#include "capstep/autodiff.h"
#include "capstep/safetensors.h"
#include "capstep/stablehlo.h"
#include "capstep/trace.h"
#include "commands.h"

namespace capstep::cli {
namespace {

// forward: params, tokens, targets -> loss; grad: + "grad.<p>" for every
// parameter; fused: with_adamw(grad), parameters and moments donated. With
// fused_attention the loss goes through fuse_attention first; bf16: then
// through optim::mixed_precision_bf16.
Program model_program(const nn::LmConfig& c, const std::string& which, optim::Precision precision, bool fused_attention) {
  Program loss = nn::lm_loss_program(c);
  if (fused_attention) loss = fuse_attention(loss);
  loss = optim::with_precision(loss, precision);
  if (which == "forward") return loss;
  std::vector<std::string> names;
  for (const nn::ParamSpec& p : nn::lm_parameters(c)) names.push_back(p.name);
  Program grad = value_and_grad(loss, names);
  if (which == "grad") return grad;
  if (which == "fused") return optim::with_adamw(grad, names, optim::AdamW{});
  throw UsageError("--program: '" + which + "' is not one of forward, grad, fused");
}

}  // namespace

int run_show(const ShowArgs& a) {
  if (a.unfused && !a.kernels) throw UsageError("--unfused goes with --kernels");
  if (a.kernels && a.precision == optim::Precision::bf16)
    throw UsageError("--kernels: the GPU's kernel plan has no bf16 kernels yet; show --precision bf16 without --kernels");
  const Program p = model_program(a.model.checked(), a.program, a.precision, a.fused_attention);
  if (a.kernels) std::cout << plan::plan_kernels(p, {!a.unfused}).describe();
  else std::cout << to_text(p);
  std::cout.flush();
  return kOk;
}

int run_export(const ExportArgs& a) {
  if (a.program == "forward") throw UsageError("--program: export takes grad or fused");
  const nn::LmConfig c = a.model.checked();
  const std::string text = to_stablehlo(model_program(c, a.program, a.precision, a.fused_attention), "capstep");
  write_file_atomically(a.out, text);
  std::cout << "wrote " << a.out << " (" << text.size() << " bytes): the " << a.program
            << (a.precision == optim::Precision::bf16 ? " bf16 mixed-precision" : "") << " program of \""
            << c.describe() << "\" as StableHLO\n";
  return kOk;
}

}  // namespace capstep::cli
