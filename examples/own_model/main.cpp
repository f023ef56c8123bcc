// A model of your own on capstep: an MLP learns XOR-like classes of points in the plane;
// captured, differentiated, AdamW fused in, trained on the host (and GPU), exported.
#include <capstep/autodiff.h>
#include <capstep/cuda.h>
#include <capstep/interpreter.h>
#include <capstep/optim.h>
#include <capstep/stablehlo.h>
#include <capstep/trace.h>
#include <capstep/version.h>
#include <cstdio>
#include <fstream>
#include <memory>
#include <random>
using namespace capstep;
int main(int argc, char** argv) {
  const int64_t N = 256, H = 32;  // points, hidden width
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> uniform(-1, 1);
  Array x({DType::f32, {N, 2}}), labels({DType::i32, {N}});  // class 1 where x0 * x1 > 0
  for (int64_t i = 0; i < 2 * N; ++i) x.set(i, uniform(rng));
  for (int64_t i = 0; i < N; ++i) labels.set(i, x.get(2 * i) * x.get(2 * i + 1) > 0);
  // The model, 2 -> H -> H -> 2 logits with tanh between, and its loss: captured as a Program.
  const std::vector<std::string> names{"w1", "b1", "w2", "b2", "w3", "b3"};
  const std::vector<Shape> shapes{{2, H}, {H}, {H, H}, {H}, {H, 2}, {2}};
  Tracer tr;
  std::vector<Tensor> w;  // the parameters' handles
  for (size_t j = 0; j < names.size(); ++j) w.push_back(tr.input(names[j], {DType::f32, shapes[j]}));
  Tensor xs = tr.input("x", x.type()), ys = tr.input("labels", labels.type());
  Tensor h = tanh(matmul(tanh(matmul(xs, w[0]) + w[1]), w[2]) + w[3]);
  Program loss = tr.finish({{"loss", cross_entropy(matmul(h, w[4]) + w[5], ys)}});
  // Gradients, then AdamW in the program. Inputs: params, m, v, x, labels, 4 scalars;
  // outputs: loss, then params, m, v updated (aliased to the inputs they replace).
  const optim::AdamW adamw{.lr = 0.01, .weight_decay = 0};
  const Program step = optim::with_adamw(value_and_grad(loss, names), names, adamw);
  // The state is the step's outputs and the inputs point into it: a run updates it in place.
  const size_t n = names.size();
  std::vector<Array> state(1 + 3 * n), scalars(4, Array::scalar(0));
  std::normal_distribution<float> normal(0, 0.5);
  for (size_t j = 0; j < n; ++j) {
    state[1 + j] = state[1 + n + j] = state[1 + 2 * n + j] = Array({DType::f32, shapes[j]});
    for (int64_t i = 0; i < state[1 + j].numel(); ++i) state[1 + j].set(i, normal(rng));
  }
  std::vector<const Array*> in;
  for (size_t j = 1; j < state.size(); ++j) in.push_back(&state[j]);
  for (const Array* a : {&x, &labels, &scalars[0], &scalars[1], &scalars[2], &scalars[3]}) in.push_back(a);
  std::printf("capstep %s: an MLP on %d points, %zu equations a step\n", CAPSTEP_VERSION, int(N), step.eqns.size());
  host::Interpreter host(step);
  std::unique_ptr<cuda::Executable> gpu;  // the GPU lane, from the same start
  if (std::string why; cuda::available(&why)) gpu = std::make_unique<cuda::Executable>(step);
  else std::printf("GPU lane: skipped (%s)\n", why.c_str());
  for (size_t i = 0; gpu && i < in.size(); ++i) gpu->upload(int(i), *in[i]);
  Array gpu_loss;
  for (int k = 1; k <= 400; ++k) {
    const optim::AdamWScalars s = optim::adamw_scalars(adamw, k);
    const float v[4] = {s.lr, s.bc1, s.bc2, s.decay};
    for (int i = 0; i < 4; ++i) scalars[i].set(0, v[i]);
    host.run(in, state);
    for (int i = 0; gpu && i < 4; ++i) gpu->upload(int(3 * n + 2) + i, scalars[i]);
    if (gpu) gpu->step();
    if (k % 50 && k != 1) continue;
    std::printf("step %3d  host loss %.4f", k, state[0].get(0));
    if (gpu) { gpu->download_output(0, gpu_loss); std::printf("  GPU loss %.4f", gpu_loss.get(0)); }
    std::printf("\n");
  }
  const std::string out = argc > 1 ? argv[1] : "own_model_step.mlir";
  std::ofstream(out) << to_stablehlo(step, "own_model");
  std::printf("final loss %.4f; the step as StableHLO: %s\n", state[0].get(0), out.c_str());
}
