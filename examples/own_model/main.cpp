// A model of your own on capstep: an MLP learns XOR-like classes of points in the plane;
// captured, differentiated, AdamW fused in, trained on the host (and GPU), saved, exported.
#include <capstep/autodiff.h>
#include <capstep/stablehlo.h>
#include <capstep/trace.h>
#include <capstep/train_step.h>
#include <capstep/version.h>
#include <cstdio>
#include <fstream>
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
  // The starting parameters, by name.
  std::vector<NamedArray> start;
  std::normal_distribution<float> normal(0, 0.5);
  for (size_t j = 0; j < names.size(); ++j) {
    start.push_back({names[j], Array({DType::f32, shapes[j]})});
    for (int64_t i = 0; i < start[j].array.numel(); ++i) start[j].array.set(i, normal(rng));
  }
  // Gradients, then AdamW in the program, on a backend: the parameters and both
  // moments live where the step runs (updated in place, never copied back);
  // each step fills AdamW's four scalars and returns the loss.
  const optim::AdamW adamw{.lr = 0.01, .weight_decay = 0};
  const Program grad = value_and_grad(loss, names);
  std::vector<TrainStep> lanes;  // the host, and the GPU from the same start when there is one
  lanes.emplace_back(grad, names, adamw, StepOptions{.lane = {BackendKind::host, true}});
  std::printf("capstep %s: an MLP on %d points, %zu equations a step\n", CAPSTEP_VERSION, int(N),
              lanes[0].backend().program().eqns.size());
  if (std::string why; backend_available(BackendKind::cuda, {}, &why))
    lanes.emplace_back(grad, names, adamw, StepOptions{.lane = {BackendKind::cuda, true}});
  else std::printf("GPU lane: skipped (%s)\n", why.c_str());
  for (TrainStep& s : lanes) {
    s.init(start);
    s.set("x", x);
    s.set("labels", labels);
  }
  double host_loss = 0;
  for (int k = 1; k <= 400; ++k) {
    host_loss = lanes[0].step();
    const double gpu_loss = lanes.size() > 1 ? lanes[1].step() : 0;
    if (k % 50 && k != 1) continue;
    std::printf("step %3d  host loss %.4f", k, host_loss);
    if (lanes.size() > 1) std::printf("  GPU loss %.4f", gpu_loss);
    std::printf("\n");
  }
  const std::string out = argc > 1 ? argv[1] : "own_model_step.mlir";
  std::ofstream(out) << to_stablehlo(lanes[0].backend().program(), "own_model");
  const std::string saved = out.substr(0, out.rfind('.')) + ".safetensors";
  lanes[0].save(saved);  // parameters, moments, step count: TrainStep::load(saved) resumes
  std::printf("final loss %.4f; the step as StableHLO: %s, its state: %s\n", host_loss, out.c_str(), saved.c_str());
}
