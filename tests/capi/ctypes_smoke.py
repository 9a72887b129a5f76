#!/usr/bin/env python3
"""libsparsert.so from Python through ctypes alone, as README.md shows it: a package made by the `sparsert` command
runs on the CPU executor (and, where an emulated or real driver is named, on "cuda") and gives what `sparsert run`
writes. On "cuda" it also runs from device memory in batch-major rows (sparsert_network_enqueue_batch_major), the
memory allocated through the driver library SPARSERT_LIBCUDA names, as a framework's tensors would be.

    ctypes_smoke.py LIBSPARSERT SPARSERT_CLI SCRATCH_DIR [cuda]
"""
import array, ctypes, os, shutil, subprocess, sys


def read_npy(path):
    data = open(path, "rb").read()
    header = 10 + data[8] + 256 * data[9]
    dims = data[10:header].decode().split("'shape': (")[1].split(")")[0]
    shape = [int(d) for d in dims.split(",") if d.strip()]
    values = array.array("f")
    values.frombytes(data[header:])
    return shape, values


def enqueue_batch_major(lib, net, x, k, m, n):
    """x ([k, n], feature-major) as n rows of k floats in device memory, through the network into n rows of m floats:
    returns them feature-major, or None with a message printed."""
    cuda = ctypes.CDLL(os.environ["SPARSERT_LIBCUDA"])
    ctx, src, dst = ctypes.c_void_p(), ctypes.c_uint64(), ctypes.c_uint64()
    ok = (cuda.cuInit(0) == 0 and cuda.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), 0) == 0 and
          cuda.cuCtxSetCurrent(ctx) == 0 and cuda.cuMemAlloc_v2(ctypes.byref(src), ctypes.c_size_t(4 * k * n)) == 0 and
          cuda.cuMemAlloc_v2(ctypes.byref(dst), ctypes.c_size_t(4 * m * n)) == 0)
    if not ok:
        print("FAILED: the driver's allocation")
        return None
    rows = array.array("f", [x[r * n + c] for c in range(n) for r in range(k)])
    cuda.cuMemcpyHtoD_v2(src, (ctypes.c_float * len(rows)).from_buffer(rows), ctypes.c_size_t(4 * len(rows)))
    lib.sparsert_network_enqueue_batch_major.argtypes = [ctypes.c_void_p, ctypes.c_uint64, ctypes.c_size_t,
                                                         ctypes.c_uint64, ctypes.c_size_t, ctypes.c_uint32,
                                                         ctypes.c_void_p]
    status = lib.sparsert_network_enqueue_batch_major(net, src.value, 4 * k * n, dst.value, 4 * m * n, n, None)
    out = array.array("f", [float("nan")] * (m * n))
    cuda.cuCtxSynchronize()
    cuda.cuMemcpyDtoH_v2((ctypes.c_float * len(out)).from_buffer(out), dst, ctypes.c_size_t(4 * len(out)))
    cuda.cuMemFree_v2(src)
    cuda.cuMemFree_v2(dst)
    if status != 0:
        print(f"FAILED: enqueue_batch_major: {status} {lib.sparsert_last_error().decode()}")
        return None
    return array.array("f", [out[c * m + r] for r in range(m) for c in range(n)])


def main():
    lib_path, cli, scratch = sys.argv[1:4]
    devices = ["cpu"] + sys.argv[4:]
    shutil.rmtree(scratch, ignore_errors=True)  # a run before this one leaves its files
    os.makedirs(scratch)
    env = dict(os.environ, SPARSERT_CACHE_DIR=os.path.join(scratch, "cache"))
    net_dir, pkg, want_path = (os.path.join(scratch, x) for x in ("net", "pkg", "want.npy"))
    for args in (["gen", "network", "--layers", "2", "--neurons", "48", "--sparsity", "0.8", "--n", "12", "--seed",
                  "9", "-o", net_dir],
                 ["compile", os.path.join(net_dir, "net.json"), "-o", pkg, "--target", "sm_90", "--ptx-only", "-q"],
                 ["run", pkg, "--input", os.path.join(net_dir, "input.npy"), "--output", want_path, "--device",
                  "cpu"]):
        subprocess.run([cli] + args, check=True, env=env, stdout=subprocess.DEVNULL)
    (k, n), x = read_npy(os.path.join(net_dir, "input.npy"))
    (m, _), want = read_npy(want_path)

    lib = ctypes.CDLL(lib_path)
    lib.sparsert_last_error.restype = ctypes.c_char_p
    lib.sparsert_network_device.restype = ctypes.c_char_p
    lib.sparsert_network_input_rows.restype = lib.sparsert_network_output_rows.restype = ctypes.c_int64
    failures = 0
    for device in devices:
        net = ctypes.c_void_p()
        status = lib.sparsert_network_open(pkg.encode(), device.encode(), 0, ctypes.byref(net))
        if status != 0:
            print(f"FAILED: open on {device}: {status} {lib.sparsert_last_error().decode()}")
            failures += 1
            continue
        assert lib.sparsert_network_device(net).decode() == device
        assert (lib.sparsert_network_input_rows(net), lib.sparsert_network_output_rows(net)) == (k, m)
        y = array.array("f", [float("nan")] * (m * n))
        status = lib.sparsert_network_run(net, (ctypes.c_float * len(x)).from_buffer(x), ctypes.c_int64(n),
                                          (ctypes.c_float * len(y)).from_buffer(y))
        rows = enqueue_batch_major(lib, net, x, k, m, n) if device == "cuda" and status == 0 else None
        lib.sparsert_network_close(net)
        worst = max(abs(a - b) / max(1.0, abs(b)) for a, b in zip(y, want)) if status == 0 else float("inf")
        if status != 0 or not worst <= 1e-5:
            print(f"FAILED: run on {device}: status {status}, largest relative error {worst}")
            failures += 1
        else:
            print(f"ctypes_smoke: {device}: {m} x {n} output within {worst:.1e} of `sparsert run`")
        if device == "cuda":
            if rows is None or rows.tolist() != y.tolist():
                print("FAILED: batch-major rows in device memory did not give run()'s output")
                failures += 1
            else:
                print(f"ctypes_smoke: {device}: the same output from {n} batch-major rows in device memory")
    bad = ctypes.c_void_p()
    status = lib.sparsert_network_open(b"/nonexistent/pkg", b"cpu", 0, ctypes.byref(bad))
    if status != 2 or b"manifest.json" not in lib.sparsert_last_error():
        print(f"FAILED: a missing package gave {status}: {lib.sparsert_last_error()}")
        failures += 1
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
