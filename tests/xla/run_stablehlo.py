#!/usr/bin/env python3
"""Compile a StableHLO text module with XLA (through JAX's own compiler entry
point) and run it: the outside oracle for capstep's to_stablehlo.

    run_stablehlo.py [--platform cpu|cuda] MODULE.mlir OUTDIR [IN0.npy IN1.npy ...]
    run_stablehlo.py [--platform cpu] --replicas N MODULE.mlir OUTDIR [R0_IN0.npy ... R1_IN0.npy ...]
    run_stablehlo.py --probe            # prints the JAX version; exit 0 if usable

With --replicas N (a module with mhlo.num_replicas = N, e.g. capstep export
--data-parallel N) XLA runs the module once per replica on N devices, each
with its own arguments: the inputs are N groups of one file per argument,
replica 0's first; outputs are OUTDIR/out<i>.r<r>.npy. On the CPU, N host
devices are made with XLA_FLAGS=--xla_force_host_platform_device_count=N (set
here before JAX starts).

Inputs are .npy files in the order of @main's arguments; outputs are written as
OUTDIR/out0.npy, out1.npy, ... in result order, and OUTDIR/report.json says what
ran: jax/jaxlib versions, the device, the number of outputs, and which inputs
XLA consumed because the module donates them (tf.aliasing_output).

The compile path is the one jax.jit takes after lowering (jax 0.10.2):
compiler.get_compile_options + Client.compile_and_load(mlir_text, ...), fed the
module text itself, so XLA parses exactly what capstep wrote.
"""
import json
import os
import sys


def main(argv):
    platform = "cpu"
    replicas = 0
    while argv[:1] in (["--platform"], ["--replicas"]):
        if argv[0] == "--platform":
            platform = argv[1]
        else:
            replicas = int(argv[1])
        argv = argv[2:]
    if replicas > 0 and platform == "cpu":
        os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") +
                                   f" --xla_force_host_platform_device_count={replicas}").strip()
    import jax

    jax.config.update("jax_enable_x64", True)  # keep f64 inputs f64
    jax.config.update("jax_platforms", platform)
    import jaxlib
    import numpy as np
    from jax._src import compiler, xla_bridge
    from jax._src.lib import xla_client as xc

    if argv[:1] == ["--probe"]:
        try:
            backend = xla_bridge.get_backend(platform)
        except Exception as e:  # say which backend is missing, not an assert trace
            plugins = "jax-cuda12-plugin" if platform in ("cuda", "gpu") else "jaxlib"
            print(f"no XLA {platform} backend in this JAX ({type(e).__name__}: {e}); "
                  f"is {plugins} installed and a device present?")
            return 1
        print(f"jax {jax.__version__} jaxlib {jaxlib.__version__} {backend.platform} "
              f"{backend.local_devices()[0].device_kind}")
        return 0
    if len(argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    module_path, outdir, in_paths = argv[0], argv[1], argv[2:]
    with open(module_path) as f:
        text = f.read()

    backend = xla_bridge.get_backend(platform)
    if replicas > 0:
        return run_replicas(jax, np, compiler, xc, backend, text, outdir, in_paths, replicas)
    device = backend.local_devices()[0]
    options = compiler.get_compile_options(num_replicas=1, num_partitions=1, backend=backend)
    exe = backend.compile_and_load(text, executable_devices=xc.DeviceList((device,)),
                                   compile_options=options)

    host_inputs = [np.load(p) for p in in_paths]
    buffers = [jax.device_put(a, device) for a in host_inputs]
    results = exe.execute_sharded(buffers).disassemble_into_single_device_arrays()
    outputs = [np.asarray(r[0]) for r in results]

    os.makedirs(outdir, exist_ok=True)
    for i, o in enumerate(outputs):
        np.save(os.path.join(outdir, f"out{i}.npy"), o)  # not ascontiguousarray: it makes 0-d arrays 1-d
    report = {
        "jax": jax.__version__,
        "jaxlib": jaxlib.__version__,
        "platform": backend.platform,
        "device": device.device_kind,
        "num_outputs": len(outputs),
        "donated_inputs": [i for i, b in enumerate(buffers) if b.is_deleted()],
    }
    with open(os.path.join(outdir, "report.json"), "w") as f:
        json.dump(report, f)
    return 0


def run_replicas(jax, np, compiler, xc, backend, text, outdir, in_paths, replicas):
    """One run of the module on `replicas` devices, each with its own inputs."""
    from jax.sharding import Mesh, NamedSharding, PartitionSpec

    devices = backend.local_devices()
    if len(devices) < replicas:
        print(f"{replicas} replicas need {replicas} devices; the {backend.platform} backend has {len(devices)}",
              file=sys.stderr)
        return 1
    devices = devices[:replicas]
    if len(in_paths) % replicas:
        print(f"{len(in_paths)} input files do not split into {replicas} replicas", file=sys.stderr)
        return 2
    k = len(in_paths) // replicas
    per_replica = [[np.load(p) for p in in_paths[r * k:(r + 1) * k]] for r in range(replicas)]
    options = compiler.get_compile_options(num_replicas=replicas, num_partitions=1, backend=backend)
    exe = backend.compile_and_load(text, executable_devices=xc.DeviceList(tuple(devices)),
                                   compile_options=options)
    # Each argument as one array over the replicas' devices, replica r's own
    # data on device r. The sharding says "replicated" only so that every
    # device holds a whole argument; nothing checks (or needs) equal copies.
    sharding = NamedSharding(Mesh(np.array(devices), ("replica",)), PartitionSpec())
    args = []
    for i in range(k):
        shards = [jax.device_put(per_replica[r][i], devices[r]) for r in range(replicas)]
        args.append(jax.make_array_from_single_device_arrays(per_replica[0][i].shape, sharding, shards))
    results = exe.execute_sharded(args).disassemble_into_single_device_arrays()
    os.makedirs(outdir, exist_ok=True)
    for i, per_device in enumerate(results):
        for r, a in enumerate(per_device):
            np.save(os.path.join(outdir, f"out{i}.r{r}.npy"), np.asarray(a))
    report = {"jax": jax.__version__, "platform": backend.platform, "replicas": replicas,
              "devices": [d.device_kind for d in devices], "num_outputs": len(results)}
    with open(os.path.join(outdir, "report.json"), "w") as f:
        json.dump(report, f)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
