"""The thread environment every benchmark here gives a run, capstep's or a peer's.

n threads for PyTorch or JAX (OMP, MKL, OpenBLAS), or for capstep. capstep's
own n threads share each GEMM's parts, each part one OpenBLAS call on one
thread: OPENBLAS_NUM_THREADS=n would start n more threads under each of them
(n x n on n cores), so capstep's environment leaves it unset.
"""
import os


def thread_env(n, capstep=False):
    env = dict(os.environ)
    for k in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        env[k] = str(n)
    env["CAPSTEP_HOST_THREADS"] = str(n)
    if capstep:
        env.pop("OPENBLAS_NUM_THREADS")
    return env
